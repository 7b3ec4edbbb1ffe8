"""Composed retrieval on the ray engine: (condition, query shard) units on Ray actors give the local
engine's rows (image and text shifts, a corrupted gallery), and a driver killed mid-run resumes to them."""

from __future__ import annotations

import pytest

import tiny_hub
from e2e import kill_and_resume, row_key
from shiftbench.engine.evaluate import evaluate
from shiftbench.engine.store import Store
from test_datasets_readers import make_cirr, write_image

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


def test_ray_driver_killed_mid_run_resumes(cirr, ray_cluster, tmp_path, one_thread):
    root, clip = cirr
    spec = _spec(root, clip, engine={"name": "ray", "address": ray_cluster["address"]},
                 shifts=[{"name": "gaussian_noise", "severity": 5}, "clean"])
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_batches=1, min_done=1, delay=0.5)
    assert 0 < len(partial) < len(ref) and row_key(resumed) == row_key(ref)
