"""End to end, segmentation: a hf SegFormer (tiny, VOC-21 id2label) on a Pascal VOC-format folder through
sb.evaluate -> store -> HTML report, killed once and resumed; miou equals a direct computation; an ADE-150
segmenter on the same data is refused before any work."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace

from e2e import kill_and_resume, report_tables, row_key


def _write_voc(root, n: int = 4):
    """JPEGImages/*.jpg, SegmentationClass/*.png (VOC palette), ImageSets/Segmentation/val.txt, from objects renders:
    the object's pixels get a VOC class, a 2-pixel ring around it the void label 255, the rest background."""
    import cv2
    from PIL import Image

    from shiftbench.datasets.voc import voc_colormap

    data = sb.load_dataset("objects")
    (root / "JPEGImages").mkdir(parents=True)
    (root / "SegmentationClass").mkdir()
    (root / "ImageSets" / "Segmentation").mkdir(parents=True)
    palette = voc_colormap().reshape(-1).tolist()
    ids = []
    for k in range(n):
        s = data.load(k * (len(data) // n))
        fg = np.asarray(s.mask) > 0
        ring = cv2.dilate(fg.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool) & ~fg
        label = np.zeros(fg.shape, np.uint8)
        label[fg] = 1 + (k * 7) % 20
        label[ring] = 255
        image_id = f"2007_{k:06d}"
        Image.fromarray(s.image).save(root / "JPEGImages" / f"{image_id}.jpg", quality=95)
        png = Image.fromarray(label, mode="P")
        png.putpalette(palette)
        png.save(root / "SegmentationClass" / f"{image_id}.png")
        ids.append(image_id)
    (root / "ImageSets" / "Segmentation" / "val.txt").write_text("\n".join(ids) + "\n")
    return root


def test_segformer_on_voc_through_the_runner(tmp_path):
    from shiftbench.metrics.segmentation import confusion_matrix, mean_iou
    from tiny_hub import save_tiny_segformer

    root = _write_voc(tmp_path / "VOC2012")
    voc = LabelSpace.voc21()
    seg = save_tiny_segformer(tmp_path / "segformer_voc", id2label=list(voc.class_names))
    model_name = f"hf:{seg}"
    assert sb.create_model(model_name).label_space.same_as(voc)  # recognised from the config's id2label
    spec = {"dataset": str(root), "models": [model_name], "metrics": ["miou"], "seed": 0, "batch_size": 2,
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}]}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_done=1, delay=0.2)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    data = sb.load_dataset(str(root))
    assert type(data).__name__ == "VocSegmentation" and data.mask_space.same_as(voc)
    samples = [data.load(i) for i in range(len(data))]
    model = sb.create_model(model_name)
    cm = sum(confusion_matrix(p, s.mask, 21) for p, s in zip(model.predict_masks([s.image for s in samples]), samples))
    [clean] = [r for r in ref if r["shift"] == "clean" and r["metric"] == "miou"]
    assert clean["value"] == pytest.approx(mean_iou(cm), abs=1e-12) and clean["n"] == 4
    tables, _, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    assert model_name in html or seg.name in html
    cells = {c for t in tables for row in t for c in row}
    assert any(c.startswith((f"{100 * clean['value']:.1f}", f"{clean['value']:.3f}", f"{clean['value']:.2f}"))
               for c in cells)


def test_ade_segmenter_on_voc_is_refused_before_work(tmp_path):
    from tiny_hub import save_tiny_segformer

    root = _write_voc(tmp_path / "VOC2012", n=2)
    seg = save_tiny_segformer(tmp_path / "segformer_ade", id2label=list(LabelSpace.ade150().class_names))
    assert sb.create_model(f"hf:{seg}").label_space.name == "ade150"
    calls = []
    spec = {"dataset": str(root), "models": [f"hf:{seg}"], "metrics": ["miou"], "shifts": ["clean"]}
    with pytest.raises(ShiftbenchError) as err:
        sb.evaluate(spec, store=tmp_path / "r.db", on_batch=lambda m, b: calls.append(b))
    msg = str(err.value)
    assert "\n" not in msg and "'ade150' (150 classes)" in msg and "'voc21' (21 classes)" in msg and "label_map" in msg
    assert calls == []  # refused before the first batch
