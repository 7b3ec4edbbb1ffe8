"""The runner's device pixel path (engine/pixels.py): corruptions and preprocessing on the models' device."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.engine.pixels import DeviceBatch, tensor_path
from shiftbench.errors import ShiftbenchError

pytest.importorskip("torch")

SHIFTS = ["clean", {"name": "gaussian_noise", "severities": [3]}, {"name": "zoom_blur", "severities": [2]},
          {"name": "contrast", "severities": [4]}]


def spec(pixels: str, **extra) -> dict:
    return {"dataset": "objects", "limit": 24, "models": ["efficientnet_lite0"], "shifts": SHIFTS,
            "metrics": ["top1"], "batch_size": 10, "log_samples": True, "engine": {"pixels": pixels}, **extra}


def predictions(db) -> dict:
    from shiftbench.results.store import Store

    with Store(db) as store:
        run = store.runs()[0]["run_id"]
        return {(p["shift"], p["sample_id"]): p["prediction"]["pred"] for p in store.predictions(run)}


def test_device_pixels_agree_with_cpu_pixels(tmp_path):
    """The same spec with pixels on the (CPU) device and on the numpy path: the same params recorded,
    the same predictions on clean, and on the corrupted images predictions that agree on all but a rare
    borderline image (the pixels differ by a fraction of a grey level)."""
    cpu = sb.evaluate(spec("cpu"), store=tmp_path / "cpu.db")
    dev = sb.evaluate(spec("device"), store=tmp_path / "dev.db")
    a, b = predictions(tmp_path / "cpu.db"), predictions(tmp_path / "dev.db")
    assert a.keys() == b.keys() and len(a) == 24 * 4
    agree = np.mean([a[k] == b[k] for k in a])
    assert agree >= 0.95, agree
    assert all(a[k] == b[k] for k in a if k[0] == "clean")
    for r, s in zip(sorted(cpu, key=lambda r: (r["shift"], r["severity"])), sorted(dev, key=lambda r: (r["shift"], r["severity"]))):
        assert (r["shift"], r["severity"], r["n"]) == (s["shift"], s["severity"], s["n"])
        assert abs(r["value"] - s["value"]) <= 2 / 24


def test_device_path_is_taken_only_where_it_can_be(monkeypatch):
    lite = sb.create_model("efficientnet_lite0")
    dummy = sb.create_model("dummy_classifier")
    noise, background = sb.create_shift("gaussian_noise"), sb.create_shift("background_color", color="red")
    assert tensor_path("device", noise, [lite])
    assert not tensor_path("auto", noise, [lite])  # a CPU model: the numpy path stays (it is faster there)
    monkeypatch.setattr(type(lite), "tensor_device", property(lambda self: "cuda:0"))
    assert tensor_path("auto", noise, [lite])
    assert not tensor_path("cpu", noise, [lite])
    assert not tensor_path("device", noise, [lite, dummy])  # one model without tensors: every model on the CPU path
    assert not tensor_path("device", background, [lite])  # no torch path for a background change


def test_device_batch_groups_sizes_and_keeps_order():
    """Images of two sizes in one batch, predicted in any order and subset (the out-of-memory backoff)."""
    from shiftbench.sample import Sample

    lite = sb.create_model("efficientnet_lite0", backend="torch")
    shift = sb.create_shift("defocus_blur")
    data = sb.load_dataset("objects", limit=4)
    samples = [data.load(i) for i in range(4)]
    for i in (1, 3):
        samples[i] = Sample(image=np.ascontiguousarray(samples[i].image[:200, :180]), id=samples[i].id,
                            label=samples[i].label)
    params = [shift.draw(s, 2) for s in samples]
    batch = DeviceBatch(shift, samples, params)
    shifted = [shift.apply(s, p).image for s, p in zip(samples, params)]
    want = lite.predict_logits(shifted)
    got = batch.predict(lite, samples)
    assert np.abs(got - want).max() < 0.5 and (got.argmax(1) == want.argmax(1)).all()
    part = batch.predict(lite, [samples[3], samples[0]])
    np.testing.assert_allclose(part, got[[3, 0]], atol=1e-4)
    thumbs = batch.shifted_samples(3)
    assert [t.id for t in thumbs] == [s.id for s in samples[:3]]
    for t, s in zip(thumbs, shifted):
        assert t.image.shape == s.shape and np.abs(t.image.astype(int) - s.astype(int)).mean() < 1
    assert isinstance(thumbs[0], Sample)


def test_cli_pixels_flag_and_bad_values(tmp_path, capsys):
    """``--pixels device`` through the CLI gives the rows of the same spec evaluated from Python; a bad value is
    one line, from the flag or from the spec."""
    from shiftbench.cli import main

    path = tmp_path / "spec.yaml"
    body = {k: v for k, v in spec("device").items() if k != "engine"} | {"limit": 6}
    path.write_text(json.dumps(body))
    assert main(["evaluate", "--config", str(path), "--store", str(tmp_path / "r.db"), "--pixels", "device"]) == 0
    assert "result rows" in capsys.readouterr().out
    from shiftbench.results.store import Store

    with Store(tmp_path / "r.db") as store:
        rows = store.rows()
    want = sb.evaluate(body | {"engine": {"pixels": "device"}})
    assert sorted((r["shift"], r["value"]) for r in rows) == sorted((r["shift"], r["value"]) for r in want)
    assert main(["evaluate", "--config", str(path), "--pixels", "gpu"]) == 2
    assert "gpu" in capsys.readouterr().err
    path.write_text(json.dumps(body | {"engine": {"pixels": "gpu"}}))
    assert main(["evaluate", "--config", str(path), "--store", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    assert "engine.pixels: expected one of auto, device, cpu" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ShiftbenchError, match="pixels 'gpu': expected one of auto, device, cpu"):
        sb.evaluate(body, pixels="gpu")


def test_ray_workers_run_pixels_on_their_device(ray_cluster, tmp_path):
    """On Ray the workers take the device path too (the driver sends the pixels setting in the spec): the
    rows and predictions of the local engine's device run, and the grid's thumbnails are the shifted images."""
    import sqlite3

    body = spec("device", limit=12, shifts=SHIFTS[:2])
    local = sb.evaluate(body, store=tmp_path / "local.db")
    ray = sb.evaluate(body, store=tmp_path / "ray.db", engine="ray", address=ray_cluster["address"])
    assert [(r["shift"], r["n"]) for r in ray] == [(r["shift"], r["n"]) for r in local]
    assert [r["value"] for r in ray] == pytest.approx([r["value"] for r in local], abs=1e-9)
    assert predictions(tmp_path / "ray.db") == predictions(tmp_path / "local.db")

    def thumbs(db):
        with sqlite3.connect(db) as con:
            return dict(con.execute("SELECT key, data FROM artifacts WHERE key LIKE 'thumb/gaussian_noise/%'"))

    a, b = thumbs(tmp_path / "local.db"), thumbs(tmp_path / "ray.db")
    assert a.keys() == b.keys() and len(a) > 0 and a == b
    with sqlite3.connect(tmp_path / "local.db") as con:
        clean = {k.split("/", 4)[4]: v for k, v in con.execute("SELECT key, data FROM artifacts WHERE key LIKE 'thumb/clean/%'")}
    noisy = {k.split("/", 4)[4]: v for k, v in a.items()}
    assert clean.keys() == noisy.keys() and all(clean[k] != noisy[k] for k in clean)  # corrupted, not clean


def test_a_killed_device_run_resumes_to_the_uninterrupted_rows(tmp_path):
    from e2e import kill_and_resume, row_key

    body = spec("device", limit=20, batch_size=5)
    ref, resumed, partial = kill_and_resume(body, tmp_path, min_batches=2, delay=0.5)
    assert len(partial) < len(ref)
    assert row_key(resumed) == row_key(ref)
