"""Analysis views (shiftbench.analysis; the step in engine/analysis.py): Grad-CAM against brute-force occlusion,
background reliance on maps with a known answer, embeddings, and the spec's analysis: section through
evaluate -> store -> report."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.analysis import (bootstrap_mean, embed_2d, gradcam, occlusion_map, outside_share,
                                 penultimate_features, stored_analysis)
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.labelspace import LabelSpace
from shiftbench.models.base import Preprocess, TorchClassifier
from shiftbench.spec import load_spec

torch = pytest.importorskip("torch")


class Tiny(TorchClassifier):
    """Two convolutions, global pooling and a linear head, random weights; ``monotone`` makes every weight
    positive, so more light on a pixel never lowers a score (attribution has a known ordering)."""

    name = "_tiny_cnn"
    task = "classification"

    def __init__(self, seed: int = 0, monotone: bool = True, resize: str = "exact"):
        torch.manual_seed(seed)
        module = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 5, padding=2), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 5, padding=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))
        if monotone:
            with torch.no_grad():
                for p in module.parameters():
                    p.abs_()
        self.preprocess = Preprocess(size=(32, 32), mean=(0.5,) * 3, std=(0.25,) * 3, resize=resize)
        self.label_space = LabelSpace.custom(["a", "b", "c"])
        self._setup(module)


def blob_image(rng, h=32, w=32) -> np.ndarray:
    img = np.full((h, w, 3), 50, np.int64)
    top, left = rng.integers(2, h - 14), rng.integers(2, w - 14)
    img[top:top + 12, left:left + 12] = rng.integers(120, 255, (12, 12, 3))
    return np.clip(img + rng.integers(0, 25, img.shape), 0, 255).astype(np.uint8)


def patch_means(m: np.ndarray, p: int) -> np.ndarray:
    h, w = m.shape
    return m[: h // p * p, : w // p * p].reshape(h // p, p, w // p, p).mean(axis=(1, 3)).ravel()


def test_gradcam_ranks_regions_as_brute_force_occlusion_does():
    """On a monotone network, the regions Grad-CAM ranks high are those whose occlusion (set to black) costs
    the score most: Spearman rank correlation over 4x4 patches, five random networks and images."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    for seed in range(5):
        model = Tiny(seed)
        image = blob_image(rng)
        (cam,), (cls,) = gradcam(model, [image])
        assert cam.shape == image.shape[:2] and cam.min() >= 0 and cam.max() > 0

        def score(im, cls=cls):
            x = torch.from_numpy(im).permute(2, 0, 1)[None].float() / 255.0
            with torch.no_grad():
                return float(model.forward_images(x)[0, cls])

        occ = occlusion_map(score, image, patch=4, fill=0)
        rho = spearmanr(patch_means(cam, 4), patch_means(occ, 4)).correlation
        assert rho > 0.9, (seed, rho)


def test_gradcam_batches_equal_single_images_and_follow_the_crop_box():
    """Maps are per image whatever the batch (mixed sizes too); with a centre crop the map is zero outside the
    crop box, and the class explained is the predicted one unless targets are given."""
    rng = np.random.default_rng(1)
    model = Tiny(3, resize="shorter")
    images = [blob_image(rng, 40, 48), blob_image(rng, 40, 48), blob_image(rng, 36, 36)]
    maps, classes = gradcam(model, images)
    for im, m, c in zip(images, maps, classes):
        (one,), (c1,) = gradcam(model, [im])
        np.testing.assert_allclose(m, one, rtol=1e-4, atol=1e-6)
        assert c == c1
        top, left, ch, cw = model.preprocess.crop_box(*im.shape[:2])
        outside = np.ones(im.shape[:2], bool)
        outside[top:top + ch, left:left + cw] = False
        assert outside.any() and (m[outside] == 0).all() and m[~outside].max() > 0
    logits = model.predict_logits(images)
    assert (classes == logits.argmax(1)).all()
    other = (classes + 1) % 3
    _, explained = gradcam(model, images, targets=other)
    assert (explained == other).all()


def test_outside_share_has_the_known_answer():
    mask = np.zeros((10, 10), bool)
    mask[2:6, 2:6] = True  # 16 pixels in, 84 out
    cam = np.where(mask, 1.0, 3.0)
    assert outside_share(cam, mask) == pytest.approx(84 * 3 / (16 + 84 * 3))
    assert outside_share(mask.astype(float), mask) == 0.0
    assert outside_share((~mask).astype(float), mask) == 1.0
    assert outside_share(np.where(mask, -5.0, 0.0), mask) is None  # negative attribution counts as none
    with pytest.raises(ShiftbenchError, match="differ in size"):
        outside_share(cam, mask[:5])


def test_bootstrap_mean_is_seeded_and_brackets_the_mean():
    v = np.random.default_rng(0).random(50)
    a = bootstrap_mean(v, seed=3)
    assert a == bootstrap_mean(v, seed=3) and a[1] < a[0] < a[2]
    assert a[0] == pytest.approx(v.mean())


def test_penultimate_features_and_embedding():
    rng = np.random.default_rng(2)
    model = Tiny(0)
    images = [blob_image(rng) for _ in range(12)]
    f = penultimate_features(model, images, batch=5)
    assert f.shape == (12, 8)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        want = model.module[:-1](((x - 0.5) / 0.25))
    np.testing.assert_allclose(f, want.numpy(), rtol=1e-4, atol=1e-5)
    coords = embed_2d(np.concatenate([f, f + 5.0]), seed=0)
    assert coords.shape == (24, 2) and np.isfinite(coords).all()
    np.testing.assert_array_equal(coords, embed_2d(np.concatenate([f, f + 5.0]), seed=0))
    with pytest.raises(ShiftbenchError, match="at least 4 points"):
        embed_2d(f[:3])


@pytest.mark.parametrize("section, message", [
    ({"views": ["gradcam", "saliency"]}, "analysis.views[1]: unknown view 'saliency'"),
    ({"views": ["gradcam", "reliance", "gradcam"]}, "analysis.views: repeated views ['gradcam', 'reliance', 'gradcam']"),
    ({"views": []}, "analysis.views: expected a list of gradcam"),
    ({"samples": 0}, "analysis.samples: expected an integer of at least 1"),
    ({"limit": 2}, "analysis.limit: expected an integer of at least 4"),
    ({"target": "true"}, "analysis.target: expected predicted or label"),
    ({"model": ["x"]}, "analysis.model: unknown key"),
    ({"models": ["efficientnet_lite9"]}, "analysis.models[0]: 'efficientnet_lite9' is not a model of this spec"),
    ("yes", "analysis: expected true or a mapping"),
])
def test_analysis_section_is_checked(section, message):
    with pytest.raises(SpecError) as err:
        load_spec({"dataset": "objects", "models": ["efficientnet_lite0"], "shifts": ["clean"],
                   "metrics": ["top1"], "analysis": section})
    assert message in str(err.value)


def test_analysis_defaults_and_identity():
    base = {"dataset": "objects", "models": ["efficientnet_lite0"], "shifts": ["clean"], "metrics": ["top1"]}
    a = load_spec({**base, "analysis": True})
    assert a.analysis.as_dict() == {"views": ["gradcam", "reliance", "embedding"], "samples": 4, "limit": 64, "models": None,
                          "target": "predicted"}
    assert load_spec({**base, "analysis": {"samples": 4}}).raw == a.raw  # defaults written out: the same run
    assert "analysis" not in load_spec(base).raw


SPEC = {"dataset": "objects", "limit": 8, "batch_size": 8, "seed": 0, "metrics": ["top1"],
        "models": ["efficientnet_lite0", "dummy_classifier"],
        "shifts": ["clean", {"name": "background_color", "params": {"color": "red"}, "severities": [5]},
                   {"name": "gaussian_noise", "severities": [3]}],
        "analysis": {"samples": 2, "limit": 8}}


def test_analysis_through_evaluate_store_and_report(tmp_path, caplog):
    from e2e import report_tables

    db = tmp_path / "r.db"
    sb.evaluate(SPEC, store=db)
    assert "dummy_classifier" in caplog.text and "left out" in caplog.text  # said, not silently dropped
    from shiftbench.results.store import Store

    with Store(db) as store:
        run = store.runs()[0]["run_id"]
        held = stored_analysis(store, run)
    assert held["done"] == {"models": ["efficientnet_lite0"], "views": ["gradcam", "reliance", "embedding"]}
    rel = held["reliance"]
    assert [(r["shift"], r["severity"]) for r in rel] == [("clean", 0), ("background_color", 5), ("gaussian_noise", 3)]
    for r in rel:
        assert len(r["values"]) == 8 and all(0.0 <= v <= 1.0 for v in r["values"])
    # the clean values are those of Grad-CAM on the clean images, computed directly
    model = sb.create_model("efficientnet_lite0")
    data = sb.load_dataset("objects", limit=8)
    samples = [data.load(i) for i in range(8)]
    maps, _ = gradcam(model, [s.image for s in samples])
    want = [outside_share(m, s.mask) for m, s in zip(maps, samples)]
    assert rel[0]["values"] == pytest.approx(want, abs=1e-4)
    assert len(held["gradcam"]) == 2 * 3  # samples x conditions, one model
    emb = held["embedding"]["efficientnet_lite0"]
    assert len(emb["points"]) == 8 * 3 and sorted(set(emb["condition"])) == [0, 1, 2]
    tables, images, html = report_tables(db, tmp_path / "report")
    assert "Background reliance" in html
    assert (tmp_path / "report" / "gradcam_1.jpg").exists() and (tmp_path / "report" / "embedding_1.png").exists()
    assert (tmp_path / "report" / "analysis.md").read_text().count("|") > 10
    heads = [t[0] for t in tables]
    assert ["condition", "efficientnet_lite0"] in heads


def test_a_run_killed_during_analysis_computes_it_on_resume_and_not_twice(tmp_path, monkeypatch):
    db = tmp_path / "r.db"
    spec = dict(SPEC, models=["efficientnet_lite0"], analysis={"views": ["reliance"], "limit": 4})
    import shiftbench.engine.analysis as analysis  # the step looks its functions up there

    def killed(*a, **k):
        raise KeyboardInterrupt  # what a kill in the middle of the step leaves: results, no analysis

    monkeypatch.setattr(analysis, "gradcam", killed)
    with pytest.raises(KeyboardInterrupt):
        sb.evaluate(spec, store=db)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] > 0
        assert con.execute("SELECT COUNT(*) FROM artifacts WHERE key LIKE 'analysis/%'").fetchone()[0] == 0
    monkeypatch.undo()
    rows = sb.evaluate(spec, store=db)
    assert rows
    with sqlite3.connect(db) as con:
        first = dict(con.execute("SELECT key, data FROM artifacts WHERE key LIKE 'analysis/%'"))
    assert "analysis/done.json" in first and "analysis/reliance.json" in first
    monkeypatch.setattr(analysis, "gradcam", killed)  # held: a third call computes nothing
    sb.evaluate(spec, store=db)
    with sqlite3.connect(db) as con:
        assert dict(con.execute("SELECT key, data FROM artifacts WHERE key LIKE 'analysis/%'")) == first
