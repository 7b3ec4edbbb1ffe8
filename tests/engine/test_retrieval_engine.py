"""Composed-retrieval runs: rows, gamma, corruption of references / texts / gallery, resume, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tiny_registry  # noqa: F401  (registers the _test_noise image shift)
from cir_fakes import SPEC, ColourGridEncoder, HashedWordsEncoder, SharedModel, fake_retrievers, random_weights

from shiftbench.datasets.objects_cir import ObjectsCIR
from shiftbench.engine.evaluate import evaluate
from shiftbench.engine.retrieval import GalleryIndex, validate_queries
from shiftbench.errors import ShiftbenchError
from shiftbench.models.retrieval import Combiner, ImageOnly, SumFusion, TextOnly, load_checkpoint
from shiftbench.registry import SHIFTS
from shiftbench.results.store import Store
from shiftbench.sample import Query, Sample
from shiftbench.shifts.retrieval import CorruptedRetrieval, WithCategories

@pytest.fixture(scope="module")
def retrievers():
    return fake_retrievers()


@pytest.fixture(scope="module")
def rows(retrievers):
    return evaluate(SPEC, models=retrievers)


def _value(rows, model, shift, severity, metric):
    found = [r for r in rows if (r["model"], r["shift"], r["severity"], r["metric"]) == (model, shift, severity, metric)]
    assert len(found) == 1, (model, shift, severity, metric)
    return found[0]


def test_rows_names_and_gamma(rows):
    models = {r["model"] for r in rows}
    assert models == {"image_only", "text_only", "sum_fusion", "combiner"}
    conditions = {(r["shift"], r["severity"]) for r in rows}
    assert conditions == {("clean", 0), ("_test_noise", 2), ("_test_noise", 5), ("text_swap", 3)}
    metrics = {r["metric"] for r in rows}
    for k in (1, 5, 10, 50):
        assert f"R@{k}" in metrics and f"gamma@{k}" in metrics and f"R@{k}[numerical]" in metrics
    assert {"R_subset@1", "R_subset@2", "R_subset@3", "mean_rank", "median_rank"} <= metrics
    for model in models:
        clean = _value(rows, model, "clean", 0, "R@50")
        assert clean["n"] == 35
        for shift, sev in (("_test_noise", 5), ("text_swap", 3)):
            shifted = _value(rows, model, shift, sev, "R@50")["value"]
            g = _value(rows, model, shift, sev, "gamma@50")
            assert g["value"] == pytest.approx(1 - (clean["value"] - shifted) / clean["value"])
            assert g["extra"]["clean"] == pytest.approx(clean["value"])
        per_cat = [r for r in rows if r["model"] == model and r["shift"] == "clean" and r["metric"].startswith("R@1[")]
        assert sum(r["n"] for r in per_cat) == 35
        assert not any(r["metric"].startswith("gamma") for r in rows if r["shift"] == "clean")


def test_text_shift_leaves_image_only_alone_and_image_shift_leaves_text_only_alone(rows):
    for metric in ("R@1", "R@10", "mean_rank"):
        assert _value(rows, "image_only", "text_swap", 3, metric)["value"] == _value(rows, "image_only", "clean", 0, metric)["value"]
        assert _value(rows, "text_only", "_test_noise", 5, metric)["value"] == _value(rows, "text_only", "clean", 0, metric)["value"]
    assert _value(rows, "image_only", "_test_noise", 5, "mean_rank")["value"] != _value(rows, "image_only", "clean", 0, "mean_rank")["value"]


class _Failing(ImageOnly):
    """image_only that dies on its n-th compose (a killed run)."""

    def __init__(self, fail_at):
        super().__init__(image_encoder=ColourGridEncoder(), text_encoder=HashedWordsEncoder())
        self.calls, self.fail_at = 0, fail_at

    def compose(self, image_features, text_features):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt("killed")
        return super().compose(image_features, text_features)


def test_killed_run_resumes_to_the_same_rows(tmp_path, rows, retrievers):
    db = tmp_path / "r.db"
    # 35 queries in batches of 32: two batches per condition; the 4th compose is _test_noise s2's second batch
    failing = {**retrievers, "image_only": _Failing(fail_at=4)}
    with pytest.raises(KeyboardInterrupt):
        evaluate(SPEC, store=db, models=failing)
    with Store(db) as store:
        done_before = len(store.rows())
    assert 0 < done_before < len(rows)
    counting = _Failing(fail_at=-1)
    resumed = evaluate(SPEC, store=db, models={**retrievers, "image_only": counting})
    # only image_only's unsaved batches ran again: the second of _test_noise s2 (its first was saved before
    # the kill), then both batches of the two conditions after it
    assert counting.calls == 5
    key = lambda r: (r["model"], r["shift"], r["severity"], r["metric"])  # noqa: E731
    assert sorted((key(r), r["value"]) for r in resumed) == sorted((key(r), r["value"]) for r in rows)
    assert len({key(r) for r in resumed}) == len(resumed)


def test_corrupted_references_texts_and_gallery():
    ds = ObjectsCIR(split="val")
    noise = SHIFTS.create("_test_noise")
    plain = CorruptedRetrieval(ds, noise, 4, seed=1)
    q0, q = ds.load(0), plain.load(0)
    assert q.text == q0.text and not np.array_equal(q.reference.image, q0.reference.image)
    assert q.meta["shift"]["name"] == "_test_noise" and q.meta["shift"]["severity"] == 4
    assert np.array_equal(noise.replay(q0.reference, q.meta["shift"]["params"]).image, q.reference.image)
    g = ds.gallery_ids()[0]
    assert np.array_equal(plain.load_gallery(g).image, ds.load_gallery(g).image)
    both = CorruptedRetrieval(ds, noise, 4, seed=1, gallery=True)
    ref_id = q0.meta["reference_id"]
    assert np.array_equal(both.load_gallery(ref_id).image, q.reference.image)  # one draw per image id
    text = CorruptedRetrieval(ds, "text_swap", 5, seed=1)
    qt = text.load(0)
    assert qt.text != q0.text and np.array_equal(qt.reference.image, q0.reference.image)
    assert SHIFTS.create("text_swap").replay(q0.text, qt.meta["shift"]["params"]) == qt.text
    assert text.load(0).text == qt.text
    with pytest.raises(ShiftbenchError, match="text"):
        CorruptedRetrieval(ds, "text_swap", 3, gallery=True)


class _Gallery:
    name = "fake"

    def __init__(self, ids, queries):
        self.ids, self.queries = ids, queries

    def gallery_ids(self):
        return self.ids

    def load_gallery(self, image_id):
        return Sample(image=np.zeros((8, 8, 3), np.uint8), id=image_id)

    def __len__(self):
        return len(self.queries)

    def load(self, i):
        return self.queries[i]


def _query(qid, target, ref="a", subset=None):
    return Query(reference=Sample(image=np.zeros((8, 8, 3), np.uint8), id=ref), text="make it red",
                 target_id=target, subset_ids=subset, id=qid)


def test_bad_input_names_the_query():
    with pytest.raises(ShiftbenchError, match="duplicate image id 'b'"):
        GalleryIndex.of(_Gallery(["a", "b", "b"], []))
    gallery = GalleryIndex.of(_Gallery(["a", "b", "c"], []))
    with pytest.raises(ShiftbenchError, match="query q7: target 'zz' is not in the gallery"):
        validate_queries([_query("q1", "b"), _query("q7", "zz")], gallery)
    with pytest.raises(ShiftbenchError, match="query q2: subset does not contain its target"):
        _query("q2", "b", subset=("a", "c"))
    bad = _query("q3", "b", subset=("b", "c"))
    bad.subset_ids = ("a", "c")  # changed after construction
    with pytest.raises(ShiftbenchError, match="query q3: subset does not contain its target"):
        validate_queries([bad], gallery)
    with pytest.raises(ShiftbenchError, match="query q4: subset image 'x'"):
        validate_queries([_query("q4", "b", subset=("b", "x"))], gallery)
    with pytest.raises(ShiftbenchError, match="query q5: target 'a' is its own reference"):
        validate_queries([_query("q5", "a", ref="a")], gallery)


def test_with_categories_fills_missing_categories():
    wrapped = WithCategories(_Gallery(["a", "b"], [_query("q1", "b")]))
    q = wrapped.load(0)
    assert q.category == "attribute" and q.meta["categories"] == ["attribute"]


def test_retriever_outputs_and_checkpoint_round_trip(tmp_path):
    from safetensors.numpy import save_file

    weights = random_weights()
    enc = {"image_encoder": ColourGridEncoder(), "text_encoder": HashedWordsEncoder()}
    path = tmp_path / "ck.safetensors"
    save_file({k: v.astype(np.float16) for k, v in weights.items()}, str(path))
    path.with_suffix(".json").write_text(json.dumps({"image_encoder": "test_colour_grid", "text_encoder": "test_hashed_words"}))
    combiner = Combiner(checkpoint=path, **enc)
    images = [np.full((16, 16, 3), v, np.uint8) for v in (10, 120, 250)]
    i = combiner.image_features(images)
    t = combiner.text_features(["make it red", "two of them", "make it red"])
    out = combiner.compose(i, t)
    assert out.shape == (3, 48) and np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)
    assert not np.allclose(combiner.compose(i[:1], t[:1]), combiner.compose(i[:1], t[1:2]))
    text_only = TextOnly(checkpoint=path, **enc)
    assert np.allclose(text_only.compose(i, t)[0], text_only.compose(i, t)[2])
    with pytest.raises(ShiftbenchError, match="trained for encoders"):
        load_checkpoint(path, "efficientnet_lite0@128", "minilm")
    with pytest.raises(ShiftbenchError, match="not found"):
        Combiner(checkpoint=tmp_path / "missing.safetensors", **enc)
    with pytest.raises(ShiftbenchError, match="3 images but 2 texts"):
        combiner.compose(i, t[:2])
    shared = SumFusion(encoder=SharedModel())
    fused = shared.compose(shared.image_features(images), shared.text_features(["a", "b", "c"]))
    assert np.allclose(np.linalg.norm(fused, axis=1), 1, atol=1e-5)


def test_tables_from_rows(rows):
    from shiftbench.report.retrieval import category_table, gamma_table, recall_table

    recall = recall_table(rows)
    clean = _value(rows, "combiner", "clean", 0, "R@10")["value"]
    assert "| combiner | " in recall and f"{100 * clean:.1f}" in recall
    assert recall.splitlines()[0] == ("| retriever | R@1 | R@5 | R@10 | R@50 | R_subset@1 | R_subset@2 | R_subset@3 "
                                      "| mean rank |")
    gammas = gamma_table(rows, k=10)
    g = _value(rows, "image_only", "_test_noise", 5, "gamma@10")["value"]
    assert "| _test_noise | 5 |" in gammas and f"{g:.3f}" in gammas and "| text_swap | 3 |" in gammas
    assert gammas.splitlines()[-1].startswith("| **mean** |  | **")
    categories = category_table(rows, k=10)
    for c in ("background", "attribute", "removal", "numerical", "object_swap", "fine_grained"):
        assert f"| {c} |" in categories


def test_all_tables_split_image_and_text_shifts(rows):
    from shiftbench.report.retrieval import retrieval_tables

    text = retrieval_tables(rows, k=10)
    image_part = text.split("### gamma@10, image shifts at severity 5")[1].split("###")[0]
    text_part = text.split("### gamma@10, text shifts at severity 3")[1].split("###")[0]
    others = text.split("### gamma@10 at the other severities")[1].split("###")[0]
    assert "| _test_noise | 5 |" in image_part and "text_swap" not in image_part and "| 2 |" not in image_part
    assert "| text_swap | 3 |" in text_part and "_test_noise" not in text_part
    # the other severities only: severity 5 is in the image table already
    assert "| _test_noise | 2 |" in others and "| _test_noise | 5 |" not in others and "text_swap" not in others


def test_train_retriever_cli_refuses_a_bad_path_and_bad_settings(tmp_path, capsys):
    from shiftbench.cli import main
    from shiftbench.models.retrieval_training import train_retrievers

    assert main(["train-retriever", "--out", str(tmp_path / "weights.pt")]) == 2
    assert "must end in .safetensors" in capsys.readouterr().err
    with pytest.raises(ShiftbenchError, match="unknown settings"):
        train_retrievers(tmp_path / "w.safetensors", learning_rate=0.1)


def test_spec_of_retrievers_cannot_mix_other_models():
    from shiftbench.errors import SpecError

    with pytest.raises(SpecError, match="cannot mix retrievers"):
        evaluate({**SPEC, "models": ["image_only", "dummy_classifier"]})


def test_cirr_folder_runs_with_keyword_categories(tmp_path, retrievers):
    from cirr_synth import make_cirr

    make_cirr(tmp_path)
    spec = {**SPEC, "dataset": str(tmp_path), "dataset_params": {}, "limit": None,
            "shifts": ["clean", {"name": "_test_noise", "severity": 5}, {"name": "text_qwerty", "severity": 2}]}
    spec.pop("limit")
    rows = evaluate(spec, models=retrievers)
    assert _value(rows, "combiner", "clean", 0, "R@1")["n"] == 2
    assert _value(rows, "image_only", "clean", 0, "R@1[attribute]")["n"] == 1  # "make it red"
    assert _value(rows, "image_only", "clean", 0, "R@1[numerical]")["n"] == 1  # "two of them"
    assert _value(rows, "text_only", "clean", 0, "R_subset@3")["n"] == 2
    assert _value(rows, "sum_fusion", "text_qwerty", 2, "gamma@50")["value"] is not None


def test_changed_retriever_weights_stop_the_resume(tmp_path, retrievers):
    import copy

    small = {**SPEC, "shifts": ["clean"], "limit": 10}
    db = tmp_path / "r.db"
    first = evaluate(small, store=db, models=retrievers)
    assert evaluate(small, store=db, models=retrievers) == first  # unchanged inputs resume
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"retrained")
    changed = copy.copy(retrievers["image_only"])
    changed.weight_files = lambda: [str(weights)]
    with pytest.raises(ShiftbenchError, match=r"model 'image_only' weights changed .*pass new_run=True"):
        evaluate(small, store=db, models={**retrievers, "image_only": changed})
    fresh = evaluate(small, store=db, models={**retrievers, "image_only": changed}, new_run=True)
    assert {r["run_id"] for r in fresh} != {r["run_id"] for r in first}
    with Store(db) as store:
        assert store.run(fresh[0]["run_id"])["identity"]["dataset"]["samples"] > 10  # queries + gallery ids


def test_a_retrieval_spec_without_metrics_takes_the_tasks_and_one_retriever_is_one(tmp_path, retrievers, capsys):
    """Left out, metrics are the retrieval task's (recall, recall_subset, rank), recorded in the run's spec; the
    progress line counts retrievers in words ("1 retriever", not "1 retrievers")."""
    small = {k: v for k, v in SPEC.items() if k != "metrics"} | {"models": ["image_only"], "shifts": ["clean"],
                                                                  "limit": 10}
    rows = evaluate(small, store=tmp_path / "r.db", models=retrievers, progress=True)
    assert "clean s0: 1 retriever in " in capsys.readouterr().out
    with Store(tmp_path / "r.db") as store:
        assert store.run()["spec"]["metrics"] == ["recall", "recall_subset", "rank"]
    listed = evaluate({**small, "metrics": ["recall", "recall_subset", "rank"]}, store=tmp_path / "r.db",
                      models=retrievers)
    assert listed == rows and {"R@10", "R_subset@1", "mean_rank"} <= {r["metric"] for r in rows}
