"""Composed retrieval on the ray engine: (condition, query shard) units on Ray actors give the local
engine's rows (image and text shifts, a corrupted gallery), and a driver killed mid-run resumes to them."""

from __future__ import annotations

import pytest

import tiny_hub
import tiny_registry  # noqa: F401  (registers the _test_noise image shift)
from cirr_synth import make_cirr, write_image
from e2e import kill_and_resume, row_key, samples_key
from shiftbench.engine.evaluate import evaluate
from shiftbench.results.store import Store

pytest.importorskip("transformers")
pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cirr(tmp_path_factory):
    root = tmp_path_factory.mktemp("cirr-ray")
    arrays = make_cirr(root / "cirr")
    for i, name in enumerate(sorted(arrays)):  # the reader fixture's 8 px images are too small for corruptions
        write_image(root / "cirr" / "img_raw" / "dev" / f"{name}.png", 100 + i, (48, 48))
    return root / "cirr", tiny_hub.save_tiny_clip(root / "clip")


def _spec(root, clip, **extra) -> dict:
    # batches of one query, units of one batch: the two queries of each condition run as separate units
    return {"dataset": str(root), "seed": 0, "log_samples": True, "batch_size": 1,
            "models": ["image_only", {"name": "sum_fusion", "params": {"encoder": f"hf:{clip}"}}],
            "shifts": [{"name": "gaussian_noise", "severities": [3, 5]}, "clean",
                       {"name": "text_qwerty", "severities": [3]}],
            "metrics": ["recall", "recall_subset", "rank"], **extra}


@pytest.mark.parametrize("params", [{}, {"corrupt_gallery": True}])
def test_ray_rows_equal_local_rows(cirr, ray_cluster, tmp_path, one_thread, params):
    root, clip = cirr
    spec = _spec(root, clip, dataset_params=params)
    local = evaluate(spec, store=tmp_path / "local.db")
    ray_rows = evaluate(spec, store=tmp_path / "ray.db", engine="ray", address=ray_cluster["address"], workers=2,
                        shard_size=1)
    assert row_key(ray_rows) == row_key(local)
    # gamma is there for every shifted condition although clean is listed after the first two
    assert {(r["model"], r["shift"], r["severity"]) for r in ray_rows if r["metric"] == "gamma@50"} == {
        (m, s, v) for m in ("image_only", "sum_fusion") for s, v in (("gaussian_noise", 3), ("gaussian_noise", 5),
                                                                      ("text_qwerty", 3))}
    with Store(tmp_path / "ray.db") as a, Store(tmp_path / "local.db") as b:
        def preds(store, rows):
            return sorted((p["model"], p["shift"], p["severity"], p["sample_id"], p["prediction"]["rank"],
                           tuple(p["prediction"]["top"])) for p in store.predictions(rows[0]["run_id"]))
        assert preds(a, ray_rows) == preds(b, local) and len(preds(a, ray_rows)) == 2 * 4 * 2
    ray_samples = samples_key(tmp_path / "ray.db")
    assert ray_samples == samples_key(tmp_path / "local.db") and ray_samples


def test_ray_driver_killed_mid_run_resumes(ray_cluster, tmp_path):
    """A driver killed mid-run (SIGKILL) resumes from the batches it saved to the uninterrupted rows; the
    fake retrievers keep this test to Ray's own start-up costs."""
    from cir_fakes import fake_retrievers

    spec = {"dataset": "objects-cir", "dataset_params": {"split": "val"}, "models": ["image_only", "combiner"],
            "batch_size": 8, "limit": 35, "shifts": ["clean", {"name": "_test_noise", "severities": [2, 5]}],
            "metrics": ["recall", "rank"], "engine": {"name": "ray", "address": ray_cluster["address"]}}
    setup = "import tiny_registry\nfrom cir_fakes import fake_retrievers\nmodels = fake_retrievers()"
    # units come back out of order and a shifted condition is finished only with its clean one, so which
    # conditions are done when the child stops depends on Ray's scheduling (none, when the first units back
    # are the shifted ones). The child stops for good after 20 of the 30 batches (2 models x 3 conditions x 5
    # batches), so it never finishes; it is killed once a batch is saved, and the resume must reuse whatever
    # it saved, finished conditions and saved batches alike, and end with the uninterrupted run's rows.
    ref, resumed, partial = kill_and_resume(spec, tmp_path, setup=setup, models=fake_retrievers(), min_batches=1,
                                            min_done=0, delay=0.3, hang_after=2 * 2 * 5)
    assert len(partial) < len(ref) and row_key(resumed) == row_key(ref)
    assert samples_key(tmp_path / "resumed.db") == samples_key(tmp_path / "ref.db") != []


def test_ray_with_retriever_objects_and_a_user_shift(ray_cluster, tmp_path):
    """Retrievers the caller passed as objects travel pickled; the tests' registered shift is imported on
    the workers; units finish out of order and shifted conditions wait for clean's values."""
    from cir_fakes import fake_retrievers

    models = fake_retrievers()
    spec = {"dataset": "objects-cir", "dataset_params": {"split": "val", "corrupt_gallery": True},
            "models": ["image_only", "text_only", "combiner"], "batch_size": 8, "limit": 35,
            "shifts": [{"name": "_test_noise", "severities": [2, 5]}, "clean", {"name": "text_swap", "severity": 3}],
            "metrics": ["recall", "recall_subset", "rank"]}
    local = evaluate(spec, store=tmp_path / "local.db", models=models)
    ray_rows = evaluate(spec, store=tmp_path / "ray.db", models=models, engine="ray",
                        address=ray_cluster["address"], workers=2, shard_size=8)
    assert row_key(ray_rows) == row_key(local)
    assert sum(r["metric"] == "gamma@10" for r in ray_rows) == 3 * 3
