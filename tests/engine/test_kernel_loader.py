"""The run kernel's loader (engine/kernel.py) serves every step of a run: evaluation, curation, quality and
analysis read their samples through it, so ``on_error: skip`` and ``pixels: device`` mean the same for all."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401 - registers _test_modeled (a shift that fails on a chosen sample)
from shiftbench.datasets import Subset
from shiftbench.engine import kernel
from shiftbench.condition import Condition
from shiftbench.engine.kernel import CLEAN, Loader, Planned
from shiftbench.engine.quality import evaluate_quality
from shiftbench.errors import ShiftbenchError
from shiftbench.results.artifacts import stored_analysis, stored_quality_rows
from shiftbench.results.store import Store
from tiny_hub import PixelFeatures, register_pixel_features

pytest.importorskip("torch")

OBJECTS = sb.load_dataset("objects")
FAILING = OBJECTS.sample_id(1)


def _spec(**extra) -> dict:
    return {"dataset": "objects", "limit": 4, "batch_size": 2, "models": ["efficientnet_lite0"], "metrics": ["top1"],
            "quality": {"metrics": ["lpips", "dino_distance", "fid"], "features": register_pixel_features(),
                        "severity": 3},
            "analysis": {"views": ["gradcam", "reliance"], "samples": 2, "limit": 4}, **extra}


def _stored(db):
    with Store(db) as store:
        run = store.runs()[0]["run_id"]
        return stored_quality_rows(store, run), stored_analysis(store, run)


def test_every_read_of_a_runs_samples_goes_through_the_loader(tmp_path, monkeypatch):
    """Setup's first batch, curation, the conditions, quality and analysis: each ``Dataset.load`` of a run
    happens inside ``Loader.load``, and each step names itself to the loader."""
    inside: list[bool] = [False]
    steps: list[tuple[str, str]] = []
    reads: list[bool] = []
    original_load, original_read = Loader.load, type(OBJECTS).load

    def load(self, cond, indices):
        steps.append((self.step, cond.shift_name))
        inside[0] = True
        try:
            return original_load(self, cond, indices)
        finally:
            inside[0] = False

    def read(self, i):
        reads.append(inside[0])
        return original_read(self, i)

    monkeypatch.setattr(Loader, "load", load)
    monkeypatch.setattr(type(OBJECTS), "load", read)
    spec = _spec(shifts=["clean", {"name": "gaussian_noise", "severities": [2]}], curate=True)
    rows = sb.evaluate(spec, store=tmp_path / "r.db")
    assert rows and reads and all(reads), f"{reads.count(False)} of {len(reads)} reads outside the loader"
    assert {step for step, _ in steps} == {"evaluate", "curate", "quality", "analysis"}
    assert ("curate", "clean") in steps and ("quality", "gaussian_noise") in steps
    assert ("analysis", "gaussian_noise") in steps


def test_skip_leaves_a_failing_sample_out_of_quality_and_analysis_too(tmp_path):
    """A shift that fails on one sample under ``on_error: skip``: the condition's rows, its quality rows and
    its analysis views all leave that sample out (and say so), the others' numbers unchanged."""
    entry = {"name": "_test_modeled", "params": {"fail_on": FAILING}, "severities": [3]}
    rows = sb.evaluate(_spec(shifts=["clean", entry], on_error="skip"), store=tmp_path / "r.db")
    by_shift = {r["shift"]: r for r in rows}
    assert by_shift["clean"]["n"] == 4 and by_shift["_test_modeled"]["n"] == 3
    quality, analysis = _stored(tmp_path / "r.db")
    assert {(r["n"], r["skipped"]) for r in quality} == {(3, 1)}
    # the paired distances are those of the three samples the shift ran on
    ref = evaluate_quality(Subset(OBJECTS, [0, 2, 3]), [{"name": "_test_modeled"}], metrics=["lpips", "dino_distance"],
                           severity=3, seed=0, features=PixelFeatures())
    for r in ref:
        got = next(q for q in quality if q["metric"] == r["metric"])
        assert got["value"] == pytest.approx(r["value"], rel=1e-12)
    assert np.isfinite(next(q["value"] for q in quality if q["metric"] == "fid"))
    reliance = {r["shift"]: r["ids"] for r in analysis["reliance"]}
    ids = [OBJECTS.sample_id(i) for i in range(4)]
    assert reliance["clean"] == ids and reliance["_test_modeled"] == [i for i in ids if i != FAILING]


def test_fail_stops_the_quality_pass_naming_the_sample():
    shift = sb.create_shift("_test_modeled", fail_on=FAILING)
    with pytest.raises(ShiftbenchError, match=rf"quality: shift '_test_modeled' \(severity 5\) failed on sample "
                                              rf"{FAILING}: RuntimeError: cannot paint"):
        evaluate_quality(Subset(OBJECTS, [0, 1, 2]), [{"name": "_test_modeled", "params": {"fail_on": FAILING}}],
                         features=PixelFeatures())
    loader = Loader(Subset(OBJECTS, [0, 1, 2]), 0, on_error="skip", pixels="cpu", step="quality")
    batch = loader.batch(Planned(Condition("", "", "_test_modeled", {}, 5), shift), 0, 3)
    assert [str(s.id) for s in batch.samples] == [OBJECTS.sample_id(0), OBJECTS.sample_id(2)]
    assert [sid for sid, _ in batch.skipped] == [FAILING]


def test_device_pixels_reach_quality_and_analysis(tmp_path, monkeypatch):
    """With ``pixels: device`` the corruption of the quality and analysis steps is made where the models'
    is (a DeviceBatch), and the numbers agree with the CPU path's to a fraction of a grey level."""
    seen: list[tuple[str, str, bool]] = []
    original = Loader.load

    def load(self, cond, indices):
        batch = original(self, cond, indices)
        seen.append((self.step, cond.shift_name, batch.pixels is not None))
        return batch

    monkeypatch.setattr(Loader, "load", load)
    shifts = ["clean", {"name": "gaussian_noise", "severities": [3]}]
    sb.evaluate(_spec(shifts=shifts, engine={"pixels": "device"}), store=tmp_path / "dev.db")
    assert {(step, on) for step, name, on in seen if name == "gaussian_noise"} == {
        ("evaluate", True), ("quality", True), ("analysis", True)}
    seen.clear()
    sb.evaluate(_spec(shifts=shifts, engine={"pixels": "cpu"}), store=tmp_path / "cpu.db")
    assert not any(on for _, _, on in seen)
    (q_dev, a_dev), (q_cpu, a_cpu) = _stored(tmp_path / "dev.db"), _stored(tmp_path / "cpu.db")
    key = lambda r: r["metric"]  # noqa: E731
    for a, b in zip(sorted(q_dev, key=key), sorted(q_cpu, key=key)):
        assert a["metric"] == b["metric"] and a["n"] == b["n"] == 4
        assert a["value"] == pytest.approx(b["value"], rel=0.05)
    dev = {r["shift"]: r["values"] for r in a_dev["reliance"]}
    cpu = {r["shift"]: r["values"] for r in a_cpu["reliance"]}
    assert dev["clean"] == cpu["clean"]
    np.testing.assert_allclose(dev["gaussian_noise"], cpu["gaussian_noise"], atol=0.05)


def test_batches_equal_the_whole_set_shifted_at_once():
    """The loader's batches of a condition, in any batch size, are the samples shifted in one call."""
    shift = sb.create_shift("gaussian_noise")
    data = Subset(OBJECTS, list(range(5)))
    whole = shift([data.load(i) for i in range(5)], severity=2, seed=7)
    cond = Planned(Condition("", "", "gaussian_noise", {}, 2), shift)
    for size in (1, 2, 5):
        got = [s for b in Loader(data, 7, on_error="fail", pixels="cpu").batches(cond, size) for s in b.samples]
        assert all(np.array_equal(a.image, b.image) for a, b in zip(got, whole)) and len(got) == 5
    assert [str(s.id) for b in Loader(data, 7).batches(CLEAN, 2, limit=3) for s in b.samples] == [
        OBJECTS.sample_id(i) for i in range(3)]
    assert kernel.error_reason(RuntimeError("a\nb")) == "RuntimeError: a" and kernel.error_reason(KeyError()) == "KeyError"


def test_a_query_shift_failure_names_the_query(tmp_path, monkeypatch):
    """Composed retrieval shifts its queries through the kernel's narrowing too: a failure stops the run
    naming the query it fails on."""
    from shiftbench.shifts import retrieval as query_shifts

    from cir_fakes import fake_retrievers

    original = query_shifts.corrupt_query
    failing = sb.load_dataset("objects-cir", split="val").load(3).id  # a query with its own reference

    def corrupt(q, shift, severity, seed):
        if q.id == failing:
            raise RuntimeError("cannot corrupt this one")
        return original(q, shift, severity, seed)

    monkeypatch.setattr("shiftbench.engine.retrieval.corrupt_query", corrupt)  # the runner's (imported) name
    spec = {"dataset": "objects-cir", "dataset_params": {"split": "val"}, "limit": 4, "batch_size": 4,
            "models": ["image_only"], "metrics": ["recall"],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [1]}]}
    with pytest.raises(ShiftbenchError) as err:
        sb.evaluate(spec, store=tmp_path / "r.db", models=fake_retrievers())
    assert str(err.value) == (f"evaluate: shift 'gaussian_noise' (severity 1) failed on sample {failing}: "
                              "RuntimeError: cannot corrupt this one")


def test_generate_reads_and_shifts_through_the_loader(tmp_path, monkeypatch):
    """``generate`` (local engine) reads every sample through ``Loader.read`` and shifts it with
    ``Loader.shift``: its manifest's params are the loader's, sample by sample."""
    from shiftbench.engine.generate import generate

    inside: list[bool] = [False]
    reads: list[bool] = []
    original_read, original_load = Loader.read, type(OBJECTS).load

    def read(self, indices):
        assert self.step == "generate"
        inside[0] = True
        try:
            return original_read(self, indices)
        finally:
            inside[0] = False

    def load(self, i):
        reads.append(inside[0])
        return original_load(self, i)

    monkeypatch.setattr(Loader, "read", read)
    monkeypatch.setattr(type(OBJECTS), "load", load)
    generate("objects", ["gaussian_noise"], [2], tmp_path / "out", limit=5, seed=3)
    assert reads and all(reads)
    manifest = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    shift = sb.create_shift("gaussian_noise")
    expected = Loader(Subset(OBJECTS, list(range(5))), 3, step="generate").load(
        Planned(Condition("", "", "gaussian_noise", {}, 2), shift), range(5))
    assert [r["params"] for r in sorted(manifest, key=lambda r: r["index"])] == expected.params
