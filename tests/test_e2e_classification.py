"""End to end, classification: sb.evaluate -> store -> HTML report on an ImageNet wnid folder, on `objects` and on a
folder of 1,000 non-wnid classes; bundled, zero-shot open_clip and zero-shot hf CLIP; each run killed once and resumed."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace

from e2e import kill_and_resume, report_tables, row_key

TEMPLATES = ["a photo of a {}."]  # one template keeps the tiny text towers' work small


def _open_clip_folder(tmp_path) -> str:
    """A real open_clip CLIP (tiny config, random init) in a local folder: ``open_clip:FOLDER`` loads it in any
    process."""
    pytest.importorskip("open_clip")
    from tiny_hub import save_tiny_open_clip

    _, weights = save_tiny_open_clip(tmp_path / "open_clip")
    return f"open_clip:{weights.parent}"


def _photos(n: int):
    """Real renders (objects: photographed objects composited on photographed scenes), spread over objects."""
    data = sb.load_dataset("objects")
    return [data.load(i * (len(data) // n)) for i in range(n)]


def _clean_top1(model, images, labels) -> float:
    return float(np.mean(model.predict_logits(images).argmax(axis=1) == np.asarray(labels)))


def _clean(rows, model):
    [row] = [r for r in rows if r["model"] == model and r["shift"] == "clean" and r["metric"] == "top1"]
    return row


def _check_report(tmp_path, rows):
    tables, _, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    cells = {c for t in tables for row in t for c in row}
    for model in {r["model"] for r in rows}:
        assert model in html
        assert f"weights of {model}" in html  # provenance: what decided the numbers
    if any(r["model"] == "efficientnet_lite0" for r in rows):  # its shipped state dict, hashed
        from shiftbench.engine.identity import model_fingerprint

        digest = model_fingerprint(sb.create_model("efficientnet_lite0"))["weights"]
        assert f"sha256 {digest[:16]}… (of its files)" in html
    for r in rows:
        if r["shift"] == "clean" and r["metric"] == "top1":
            # the report prints percentages or fractions; one of them holds the stored value
            assert any(c.startswith((f"{100 * r['value']:.1f}", f"{r['value']:.3f}", f"{r['value']:.2f}")) for c in cells), \
                (r, sorted(cells)[:50])


def test_wnid_folder_bundled_and_zero_shot_models(tmp_path):
    """The README's path: an ImageNet wnid folder scored by the bundled model, open_clip and hf CLIP zero-shot
    (issue 13, item 1: zero-shot models used to be refused here); killed mid-run, resumed to the same rows."""
    from tiny_hub import save_tiny_clip

    inet = LabelSpace.imagenet1k()
    photos = _photos(4)
    root = tmp_path / "wnids"
    for k, s in enumerate(photos):
        folder = root / inet.ids[s.label]
        folder.mkdir(parents=True, exist_ok=True)
        _save(s.image, folder / f"x{k}.png")
    clip = save_tiny_clip(tmp_path / "clip")
    open_clip = _open_clip_folder(tmp_path)
    spec = {"dataset": str(root), "seed": 0, "batch_size": 2, "metrics": ["top1"],
            "models": ["efficientnet_lite0", {"name": f"hf:{clip}", "params": {"templates": TEMPLATES}},
                       {"name": open_clip, "params": {"templates": TEMPLATES}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}]}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_done=1, delay=0.1)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    assert len({r["model"] for r in ref}) == 3
    data = sb.load_dataset(str(root))
    samples = [data.load(i) for i in range(len(data))]
    images, labels = [s.image for s in samples], [s.label for s in samples]
    assert sorted(labels) == sorted(s.label for s in photos)  # wnid folders carry ImageNet indices
    assert _clean(ref, "efficientnet_lite0")["value"] == pytest.approx(
        _clean_top1(sb.create_model("efficientnet_lite0"), images, labels))
    assert _clean(ref, "efficientnet_lite0")["value"] > 0  # real photos land on their ImageNet classes
    hf_label = [r["model"] for r in ref if r["model"].startswith("hf:")][0]
    hf = sb.create_model(f"hf:{clip}", templates=TEMPLATES)
    assert _clean(ref, hf_label)["value"] == pytest.approx(_clean_top1(hf, images, labels))
    open_clip_label = [r["model"] for r in ref if r["model"].startswith("open_clip:")][0]
    assert _clean(ref, open_clip_label)["value"] == pytest.approx(
        _clean_top1(sb.create_model(open_clip, templates=TEMPLATES), images, labels))
    _check_report(tmp_path, resumed)


def _save(image, path):
    from PIL import Image

    Image.fromarray(image).save(path)


def test_objects_with_the_bundled_model(tmp_path):
    spec = {"dataset": "objects", "limit": 4, "seed": 0, "batch_size": 2, "metrics": ["top1", "ece"],
            "models": ["efficientnet_lite0"], "shifts": ["clean", {"name": "gaussian_noise", "severities": [4]}]}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_done=1)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    data = sb.load_dataset("objects", limit=4)
    samples = [data.load(i) for i in range(4)]
    assert _clean(ref, "efficientnet_lite0")["value"] == pytest.approx(
        _clean_top1(sb.create_model("efficientnet_lite0"), [s.image for s in samples], [s.label for s in samples]))
    _check_report(tmp_path, resumed)


def test_thousand_non_wnid_folders_are_not_imagenet(tmp_path):
    """Issue 13, item 2: 1,000 folders cls_0000.. are a custom space, not ImageNet by count. A bundled ImageNet
    model is refused with one line saying how to map; label_map makes it run; a zero-shot model adopts the
    folder names (on a copy)."""
    root = tmp_path / "folders"
    photos = _photos(4)
    for i in range(1000):
        (root / f"cls_{i:04d}").mkdir(parents=True)
    for k, s in enumerate(photos):  # a few real photos, in the folders of their ImageNet index
        _save(s.image, root / f"cls_{s.label:04d}" / f"x{k}.png")
    for i in range(1000):  # every other class holds one small picture
        if not any((root / f"cls_{i:04d}").iterdir()):
            _save(np.full((8, 8, 3), i % 256, np.uint8), root / f"cls_{i:04d}" / "y.png")
    data = sb.load_dataset(str(root))
    assert data.label_space.name != "imagenet1k" and data.label_space.num_classes == 1000
    base = {"dataset": str(root), "seed": 0, "batch_size": 2, "metrics": ["top1"], "shifts": ["clean"],
            "ids": str(tmp_path / "ids.txt"), "log_samples": True}
    ids = [data.sample_id(i) for i in range(len(data)) if data.sample_id(i).split("/")[1].startswith("x")]
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    with pytest.raises(ShiftbenchError) as err:
        sb.evaluate(dict(base, models=["efficientnet_lite0"]), store=tmp_path / "refused.db")
    msg = str(err.value)
    assert "\n" not in msg and "label_map" in msg and "'imagenet1k'" in msg and "wnids" in msg
    mapped = sb.evaluate(dict(base, models=["efficientnet_lite0"], label_map={f"cls_{i:04d}": i for i in range(1000)}),
                         store=tmp_path / "mapped.db")
    samples = [data.load(data_index) for data_index in [list(map(data.sample_id, range(len(data)))).index(i) for i in ids]]
    assert [r["value"] for r in mapped if r["metric"] == "top1"] == [pytest.approx(_clean_top1(
        sb.create_model("efficientnet_lite0"), [s.image for s in samples], [s.label for s in samples]))]
    open_clip = _open_clip_folder(tmp_path)
    given = sb.create_model(open_clip, templates=TEMPLATES)
    zero = sb.evaluate(dict(base, models=[open_clip]), store=tmp_path / "zero.db", models={open_clip: given})
    assert given.label_space.name == "imagenet1k" and given._class_features is None  # the caller's object untouched
    from shiftbench.results.store import Store

    store = Store(tmp_path / "zero.db")
    preds = store.predictions(zero[0]["run_id"])
    store.close()
    assert preds and all(p["prediction"]["pred_name"].startswith("cls_") for p in preds)  # folder names, not "tench"
