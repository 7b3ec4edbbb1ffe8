"""Curation inside the protocol: a spec's ``curate:`` section scores only the samples every classifier gets
right on clean (ObjectCompose), records what it kept, survives a kill, and the report says so with n."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.engine.curate import curated_indices
from shiftbench.errors import SpecError
from shiftbench.results.store import Store
from shiftbench.spec import load_spec

from e2e import kill_and_resume, report_tables

SPEC = {"dataset": "objects", "dataset_params": {"scenes_per_object": 1}, "limit": 16, "batch_size": 4,
        "models": ["efficientnet_lite0", "efficientnet_lite1"],
        "shifts": ["clean", {"name": "background_color", "severity": 5, "params": {"color": "red"}},
                   {"name": "object_only", "severity": 5}],
        "metrics": ["top1"], "seed": 0, "curate": True}


def _clean_hits(model_name: str, n: int) -> np.ndarray:
    """Top-1 hits on clean of the first n samples, computed here without the runner (the reference)."""
    data = sb.load_dataset("objects", scenes_per_object=1, limit=n)
    model = sb.create_model(model_name)
    samples = [data.load(i) for i in range(n)]
    pred = np.asarray(model.predict_logits([s.image for s in samples])).argmax(axis=1)
    return pred == np.array([s.label for s in samples])


def test_curated_run_scores_exactly_the_samples_every_model_gets_right(tmp_path):
    hits = _clean_hits("efficientnet_lite0", 16) & _clean_hits("efficientnet_lite1", 16)
    data = sb.load_dataset("objects", scenes_per_object=1, limit=16)
    expected = [data.sample_id(i) for i in np.flatnonzero(hits)]
    assert 0 < len(expected) < 16  # the filter does something on this cut
    rows = sb.evaluate(SPEC, store=tmp_path / "c.db")
    clean = [r for r in rows if r["shift"] == "clean"]
    assert {r["n"] for r in rows} == {len(expected)}
    assert all(r["value"] == 1.0 for r in clean)  # by construction: every kept sample is right on clean
    with Store(tmp_path / "c.db") as db:
        run = db.runs()[0]["run_id"]
        kept = json.loads(db.artifacts(run, "curation.json")[0]["data"])
        stored_ids = {tuple(sorted(r["ids"])) for r in db.samples(run)}
    assert kept["ids"] == expected and kept["kept"] == len(expected) and kept["total"] == 16
    assert kept["models"] == ["efficientnet_lite0", "efficientnet_lite1"]
    assert stored_ids == {tuple(sorted(expected))}  # per-sample values exist for the curated ids only
    tables, _, html = report_tables(tmp_path / "c.db", tmp_path / "rep")
    assert f"n = {len(expected)} of 16 samples" in html and "classifies correctly on clean" in html
    # curation changes which samples are scored: another run id than the same spec without it
    plain = sb.evaluate({**SPEC, "curate": None, "shifts": ["clean"]}, store=tmp_path / "c.db")
    assert {r["n"] for r in plain} == {16}


def test_curation_models_can_differ_from_the_evaluated_ones_and_match_the_cli_list(tmp_path):
    from shiftbench.engine.curate import curate

    # Lite2 only curates (it is not evaluated); the protocol and `shiftbench curate` keep the same ids
    spec = {**SPEC, "dataset_params": {}, "models": ["efficientnet_lite0"], "shifts": ["clean"],
            "curate": {"models": ["efficientnet_lite0", "efficientnet_lite2"]}}
    rows = sb.evaluate(spec, store=tmp_path / "c.db")
    listed = curate("objects", ["efficientnet_lite0", "efficientnet_lite2"], tmp_path / "ids.txt", limit=16)
    with Store(tmp_path / "c.db") as db:
        kept = json.loads(db.artifacts(db.runs()[0]["run_id"], "curation.json")[0]["data"])
    assert kept["ids"] == listed["ids"] and rows[0]["n"] == listed["kept"] and [r["model"] for r in rows] == \
        ["efficientnet_lite0"]
    assert kept["models"] == ["efficientnet_lite0", "efficientnet_lite2"] and set(kept["wrong_per_model"]) == \
        {"efficientnet_lite0", "efficientnet_lite2"}


def test_curated_run_killed_mid_run_resumes_to_the_same_rows(tmp_path):
    ref, resumed, partial = kill_and_resume(SPEC, tmp_path, min_batches=2)
    key = lambda rows: sorted((r["model"], r["shift"], r["metric"], r["value"], r["n"]) for r in rows)  # noqa: E731
    assert key(resumed) == key(ref)
    assert len(partial) < len(ref)


def test_curated_indices_against_a_hand_count():
    class Model:
        task = "classification"

        def __init__(self, right):
            self.right = right

        def predict_logits(self, images):
            out = np.zeros((len(images), 4))
            for k, im in enumerate(images):
                out[k, int(im[0, 0, 0]) if int(im[0, 0, 1]) in self.right else (int(im[0, 0, 0]) + 1) % 4] = 1
            return out

    class Plan:
        @staticmethod
        def targets(samples):
            return samples

        @staticmethod
        def outputs(logits):
            return logits

    class Data:
        def __len__(self):
            return 10

        def load(self, i):
            image = np.zeros((4, 4, 3), np.uint8)
            image[0, 0] = (i % 4, i, 0)
            return sb.Sample(image=image, label=i % 4, id=f"s{i}")

    nets = {"a": (Model({0, 1, 2, 3, 5, 8}), Plan()), "b": (Model({1, 2, 5, 6, 8, 9}), Plan())}
    kept, summary = curated_indices(Data(), nets, batch_size=3)
    assert kept == [1, 2, 5, 8]
    assert summary["wrong_per_model"] == {"a": 4, "b": 4} and summary["dropped"]["wrong"] == 6


@pytest.mark.parametrize("value,message", [
    ("yes", "expected true or a mapping"), ({"model": ["x"]}, "curate.model"),
    ({"models": []}, "curate.models: expected a non-empty list"), ({"models": ["efficientnet_lite9"]}, "curate.models[0]"),
    ({"min_mask_fraction": 2}, "between 0 and 1")])
def test_bad_curate_sections_are_one_line_spec_errors(value, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_spec({**SPEC, "curate": value})


def test_a_bad_curate_section_through_the_cli_is_one_error_line(tmp_path):
    spec = tmp_path / "s.yaml"
    import yaml

    spec.write_text(yaml.safe_dump({**SPEC, "limit": 4, "curate": {"models": ["efficientnet_lite9"]}}))
    code = "import sys; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    res = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(spec), "--store",
                          str(tmp_path / "x.db")], capture_output=True, text=True)
    assert res.returncode == 2 and "curate.models[0]" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x.db").exists()
