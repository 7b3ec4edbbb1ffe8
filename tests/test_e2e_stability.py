"""End to end, ImageNet-P stability (issue 39): a spec with perturbation sequences through sb.evaluate -> store ->
report, killed once and resumed; the stored flip probability and top-5 distance equal the reference formulas on
the model's own logits of the shift's frames; the device pixel path equals the CPU path; spec mistakes are one
line; generate --protocol imagenet-p writes the frames the run scores."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

import shiftbench as sb
from shiftbench.cli import cli as main
from shiftbench.cli import main as run_main
from shiftbench.errors import SpecError
from shiftbench.results.store import Store

from e2e import kill_and_resume, report_tables, row_key
from metrics.test_stability import ref_flip_prob, ref_ranking_dist, ref_ranks

SHIFTS = ["clean", {"name": "p_brightness"}, {"name": "p_gaussian_noise"}, {"name": "p_rotate", "severities": [2]},
          {"name": "p_translate", "params": {"crop": 96}}]


def _spec(**extra):
    return {"dataset": "objects", "limit": 3, "seed": 0, "batch_size": 2, "models": ["efficientnet_lite0"],
            "shifts": SHIFTS, **extra}


def _value(rows, shift, metric, severity=1):
    [row] = [r for r in rows if r["shift"] == shift and r["metric"] == metric and r["severity"] == severity]
    return row


def test_sequences_through_evaluate_store_report_and_a_resume(tmp_path):
    ref, resumed, partial = kill_and_resume(_spec(), tmp_path, min_done=1)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    assert {r["metric"] for r in ref} == {"top1", "ece", "flip_prob", "t5d"}  # the stability metrics added by default
    assert {r["metric"] for r in ref if r["shift"] != "clean"} == {"flip_prob", "t5d"}
    # the stored numbers are the reference formulas on the model's logits of the frames the shift makes
    model = sb.create_model("efficientnet_lite0")
    data = sb.load_dataset("objects", limit=3)
    for name, severity, params, noise in (("p_brightness", 1, {}, False), ("p_gaussian_noise", 1, {}, True),
                                          ("p_rotate", 2, {}, False), ("p_translate", 1, {"crop": 96}, False)):
        shift = sb.create_shift(name, **params)
        scores = np.stack([model.predict_logits(list(shift(data.load(i), severity=severity, seed=0).frames))
                           for i in range(3)])
        top1 = scores.argmax(axis=-1)
        assert _value(ref, name, "flip_prob", severity)["value"] == pytest.approx(
            ref_flip_prob(list(top1), noise, severity), abs=1e-9)
        assert _value(ref, name, "t5d", severity)["value"] == pytest.approx(
            ref_ranking_dist(ref_ranks(scores), noise, severity, scores.shape[-1]), abs=1e-9)
        assert _value(ref, name, "flip_prob", severity)["n"] == 3
    tables, _, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    assert "Stability" in html and "mFR" in html and "p_translate crop=96" in html
    flips = 100 * _value(ref, "p_brightness", "flip_prob")["value"]
    assert any(c.startswith(f"{flips:.1f}") for t in tables for row in t for c in row)


def test_device_pixels_equal_the_cpu_path(tmp_path):
    spec = _spec(shifts=["clean", {"name": "p_gaussian_noise"}, {"name": "p_brightness"}])
    cpu = sb.evaluate({**spec, "engine": {"pixels": "cpu"}}, store=tmp_path / "cpu.db")
    device = sb.evaluate({**spec, "engine": {"pixels": "device"}}, store=tmp_path / "device.db")
    assert row_key(cpu) == row_key(device)
    with Store(tmp_path / "cpu.db") as a, Store(tmp_path / "device.db") as b:
        sa = {(s["shift"], s["metric"]): s["values"].tolist() for s in a.samples(a.runs()[-1]["run_id"])}
        sb_ = {(s["shift"], s["metric"]): s["values"].tolist() for s in b.samples(b.runs()[-1]["run_id"])}
    assert sa == sb_ and ("p_gaussian_noise", "flip_prob") in sa


@pytest.mark.parametrize("metrics, says", [
    (["top1"], "are scored by flip_prob and t5d; add them"),
    (["flip_prob"], "score(s) only perturbation sequences"),
])
def test_metrics_that_cannot_score_a_condition_are_one_line(tmp_path, metrics, says):
    with pytest.raises(SpecError, match=re.escape(says)):
        sb.evaluate(_spec(metrics=metrics), store=tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()


def test_generate_imagenet_p_writes_the_frames_the_run_scores(tmp_path, capsys):
    from PIL import Image

    root = tmp_path / "data" / "n01440764"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (260, 300, 3), dtype=np.uint8)).save(root / "a.JPEG")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["generate", "--dataset", str(tmp_path / "data"), "--shift", "p_rotate,p_shot_noise",
                                    "--out", str(out), "--protocol", "imagenet-p"])
    assert res.exit_code == 0, res.output
    assert "= 62 files (ImageNet-P sequences: a frame per file)" in res.output  # the estimate before any work
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert {r["shift"] for r in records} == {"p_rotate", "p_shot_noise"} and all(r["severity"] == 1 for r in records)
    from shiftbench.engine.spec import preprocess_section

    resized = preprocess_section({"resize": 256}, "test").apply(sb.load_dataset(str(tmp_path / "data")).load(0))
    for r in records:
        folder = out / r["output"]
        files = sorted(folder.glob("*.png"))
        assert len(files) == r["frames"] == 31 and folder.name == "a"
        frames = np.stack([np.asarray(Image.open(f)) for f in files])
        assert frames.shape == (31, 224, 224, 3)
        again = sb.create_shift(r["shift"], **r["config"]).replay(resized, r["params"])
        assert np.array_equal(again.frames, frames)  # PNG is lossless: the bytes a run on this folder would score
    code = run_main(["generate", "--dataset", str(tmp_path / "data"), "--shift", "fog", "--out", str(tmp_path / "o2"),
                     "--protocol", "imagenet-p"])
    err = capsys.readouterr().err
    assert code != 0 and "fog is not one" in err and "Traceback" not in err and not (tmp_path / "o2").exists()


def test_ray_workers_give_the_local_engines_numbers(ray_cluster, tmp_path):
    """Sequences on Ray actors (shards of 2 sequences, 2 workers): the same rows and per-sequence values."""
    spec = {"dataset": "objects", "limit": 6, "seed": 3, "batch_size": 2,
            "models": ["efficientnet_lite0", {"name": "dummy_classifier", "params": {"label_space": "imagenet1k"}}],
            "shifts": ["clean", {"name": "p_brightness"}, {"name": "p_gaussian_noise", "severities": [2]}]}
    local = sb.evaluate(spec, store=tmp_path / "local.db")
    ray = sb.evaluate({**spec, "engine": {"name": "ray", "address": ray_cluster["address"], "workers": 2,
                                          "shard_size": 2}}, store=tmp_path / "ray.db")
    assert row_key(ray) == row_key(local)

    def values(db):
        with Store(db) as store:
            return {(s["model"], s["shift"], s["metric"]): (s["ids"], s["values"].tolist())
                    for s in store.samples(store.runs()[-1]["run_id"])}

    assert values(tmp_path / "ray.db") == values(tmp_path / "local.db")
