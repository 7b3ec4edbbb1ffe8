"""Preprocessing as a step of the run: the spec's ``preprocess:`` section (typed, checked with errors that name the
key, in the run's identity only when set), applied by the kernel's loader right after each read, before any
shift, so that every step of a run (evaluation, curation, quality, analysis, the dry run's first batch) sees the
same pixels; shown in the report's provenance."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401 - _test_tiny, _test_noise
from shiftbench.engine.kernel import CLEAN, Loader
from shiftbench.errors import SpecError
from shiftbench.report.build import _inputs, preprocess_text
from shiftbench.results.records import Run, load
from shiftbench.results.store import spec_hash
from shiftbench.spec import PreprocessSection, load_spec

BASE = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
        "metrics": ["top1"], "batch_size": 4, "limit": 6, "shifts": ["clean", {"name": "_test_noise", "severity": 2}]}


def test_section_is_typed_frozen_normalised_and_absent_from_the_identity_when_unset():
    spec = load_spec({**BASE, "preprocess": {"resize": 36, "crop": 32}})
    assert spec.preprocess == PreprocessSection(36, "bilinear", (32, 32))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.preprocess.resize = 3  # type: ignore[misc]
    assert json.dumps(spec.raw["preprocess"]) == json.dumps({"resize": 36, "interpolation": "bilinear", "crop": [32, 32]})
    # written two ways, one run; unset (or empty), the identity of before
    same = load_spec({**BASE, "preprocess": {"crop": [32, 32], "interpolation": "bilinear", "resize": 36}})
    assert spec_hash(same.raw) == spec_hash(spec.raw)
    assert "preprocess" not in load_spec(BASE).raw and "preprocess" not in load_spec({**BASE, "preprocess": {}}).raw
    assert load_spec({**BASE, "preprocess": {"crop": [20, 30]}}).raw["preprocess"] == \
        {"resize": None, "interpolation": None, "crop": [20, 30]}
    other = load_spec({**BASE, "preprocess": {"resize": 36, "crop": 32, "interpolation": "bicubic"}})
    assert spec_hash(other.raw) != spec_hash(spec.raw)


@pytest.mark.parametrize("value, message", [
    ({"resize": -1}, r"preprocess\.resize: expected a positive integer \(the shorter side in pixels\), got -1"),
    ({"resize": 8, "interpolation": "cubic"}, r"preprocess\.interpolation: unknown interpolation 'cubic' "
                                              r"\(did you mean 'bicubic'\?\); choose from bilinear, bicubic"),
    ({"interpolation": "nearest"}, r"preprocess\.interpolation: only a resize takes it"),
    ({"crop": [0, 3]}, r"preprocess\.crop: expected a positive integer or \[height, width\], got \[0, 3\]"),
    ({"crop": "224"}, r"preprocess\.crop: expected a positive integer or \[height, width\]"),
    ({"resise": 8}, r"preprocess\.resise: unknown key \(did you mean 'resize'\?\); known keys: resize, interpolation, crop"),
    ([256], r"preprocess: expected a mapping with keys resize, interpolation, crop"),
])
def test_errors_name_the_key_in_one_line(value, message):
    with pytest.raises(SpecError, match=message) as info:
        load_spec({**BASE, "preprocess": value})
    assert "\n" not in str(info.value)


def test_errors_name_the_spec_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("dataset: _test_tiny\nmodels: [dummy_classifier]\nshifts: [clean]\nmetrics: [top1]\n"
                    "preprocess: {resize: 0}\n")
    with pytest.raises(SpecError, match=rf"{path}: preprocess\.resize: expected a positive integer"):
        load_spec(str(path))


def test_the_loader_preprocesses_right_after_reading_before_the_shift():
    ds = sb.load_dataset("_test_tiny")
    section = load_spec({**BASE, "preprocess": {"resize": 20, "crop": [16, 12]}}).preprocess
    noise = sb.create_shift("_test_noise")
    plain, pre = Loader(ds, 0), Loader(ds, 0, preprocess=section)
    clean = pre.read(range(3)).samples
    assert [s.image.shape for s in clean] == [(16, 12, 3)] * 3
    np.testing.assert_array_equal(clean[0].image, section.apply(ds.load(0)).image)
    from shiftbench.condition import Condition
    from shiftbench.engine.kernel import Planned

    cond = Planned(Condition("", "", "_test_noise", {}, 2), noise)
    shifted = pre.load(cond, range(3))
    # the shift sees the preprocessed sample: its draw and its pixels are those of shifting that sample
    for s, p, ref in zip(shifted.samples, shifted.params, clean):
        assert p == noise.draw(ref, 2, 0)
        np.testing.assert_array_equal(s.image, noise.apply_batch([ref], [p])[0].image)
    assert plain.read([0]).samples[0].image.shape == (40, 48, 3)


def test_a_crop_larger_than_an_image_stops_the_run_or_is_skipped(tmp_path):
    spec = {**BASE, "preprocess": {"crop": 44}}  # the tiny images are 40 x 48
    with pytest.raises(sb.ShiftbenchError, match=r"sample img000: the centre crop 44x44 is larger than the image"):
        sb.evaluate(spec, store=tmp_path / "a.db")
    ds = sb.load_dataset("_test_tiny")
    batch = Loader(ds, 0, on_error="skip", preprocess=load_spec(spec).preprocess).batch(CLEAN, 0, 3)
    assert batch.samples == [] and [sid for sid, _ in batch.skipped] == ["img000", "img001", "img002"]


pytest.importorskip("torch")
OBJECTS = sb.load_dataset("objects")


def test_every_step_of_a_run_sees_the_preprocessed_pixels(tmp_path, monkeypatch):
    """The first batch (dry run's check), curation, every condition, quality and analysis: each sample a step
    shifts or scores comes through the loader preprocessed; the run's identity records it and the report's
    provenance says it."""
    from tiny_hub import register_pixel_features

    seen: list[tuple[str, tuple]] = []
    original = Loader.shift

    def shift(self, cond, read):
        seen.extend((self.step, s.image.shape) for s in read.samples)
        return original(self, cond, read)

    monkeypatch.setattr(Loader, "shift", shift)
    spec = {"dataset": "objects", "limit": 4, "batch_size": 2, "models": ["efficientnet_lite0"], "metrics": ["top1"],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}], "curate": True,
            "quality": {"metrics": ["lpips"], "features": register_pixel_features(), "severity": 2},
            "analysis": {"views": ["gradcam", "reliance"], "samples": 2, "limit": 4},
            "preprocess": {"resize": 240, "interpolation": "bicubic", "crop": [208, 200]}}
    rows = sb.evaluate(spec, store=tmp_path / "r.db")
    assert rows and {step for step, _ in seen} >= {"evaluate", "curate", "quality", "analysis"}
    assert {shape for _, shape in seen} == {(208, 200, 3)}
    run, = load(tmp_path / "r.db")
    assert run.spec["preprocess"] == {"resize": 240, "interpolation": "bicubic", "crop": [208, 200]}
    assert ("preprocessing", "resize shorter side to 240 (bicubic, Pillow), then centre crop 208x200 (before any shift; "
                             "masks and boxes follow)") in _inputs(run)


def test_report_provenance_without_preprocessing_has_no_line():
    assert preprocess_text(None) is None
    assert all(key != "preprocessing" for key, _ in _inputs(Run("r", {"dataset": "x"}, {}, 0, 0.0, None, "done")))


def test_composed_retrieval_refuses_preprocessing(tmp_path):
    from cir_fakes import SPEC, fake_retrievers

    with pytest.raises(SpecError, match=r"preprocess: not applied to composed retrieval"):
        sb.evaluate({**SPEC, "preprocess": {"resize": 64}}, store=tmp_path / "r.db", models=fake_retrievers())
