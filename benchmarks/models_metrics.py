"""Speed of the bundled model adapters and of the metrics (python benchmarks/models_metrics.py).

Prints a Markdown table: model load time, images per second through ``predict_logits`` (preprocessing
included) against the bare forward pass on a pre-made tensor, U2-Net-p per image, COCO evaluation
against pycocotools on the same fixture, and MiniLM caption similarity.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "metrics"))

import shiftbench as sb  # noqa: E402


def _best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def models(batch: int = 32) -> list[str]:
    import torch

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (300, 400, 3), dtype=np.uint8) for _ in range(batch)]
    rows = ["| model | load s | predict_logits img/s (batch 32, 300x400 in) | bare forward img/s | preprocessing share |",
            "|---|---|---|---|---|"]
    for v in range(3):
        t = time.perf_counter()
        model = sb.create_model(f"efficientnet_lite{v}")
        load = time.perf_counter() - t
        model.predict_logits(images[:4])  # warm-up
        full = _best(lambda: model.predict_logits(images))
        x = model.preprocess_tensor(images)
        with torch.inference_mode():
            bare = _best(lambda: model.forward(x))
        rows.append(f"| efficientnet_lite{v} | {load:.2f} | {batch / full:.1f} | {batch / bare:.1f} | {1 - bare / full:.0%} |")
    u2 = sb.create_model("u2netp")
    u2.predict(images[:1])
    per = _best(lambda: u2.predict(images[:8])) / 8
    rows.append(f"| u2netp | - | {1 / per:.1f} (one image per run: the ONNX graph has batch 1) | - | - |")
    return rows


def metrics() -> list[str]:
    from test_metric_detection import _pycocotools, _random_fixture

    from shiftbench.metrics.detection import STAT_NAMES, coco_evaluate

    rows = ["| metric | fixture | shiftbench s | reference s | max abs difference |", "|---|---|---|---|---|"]
    for iou_type, n, masks in (("bbox", 500, False), ("segm", 40, True)):
        dets, gts = _random_fixture(11, n_images=n, masks=masks)
        t = time.perf_counter()
        ours = coco_evaluate(dets, gts, iou_type)
        ours_s = time.perf_counter() - t
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            ref = _pycocotools(dets, gts, iou_type)
        ref_s = time.perf_counter() - t
        diff = max(abs(ours[k] - ref[k]) for k in STAT_NAMES)
        rows.append(f"| {iou_type} AP/AR (12 stats) | {n} images, 160 px | {ours_s:.2f} | {ref_s:.2f} (pycocotools) | {diff:.1e} |")
    text = sb.create_metric("text_similarity")
    captions = [f"a photo of a number {i} on a table" for i in range(256)]
    text.update(captions[:8], captions[:8])
    t = time.perf_counter()
    text.update(captions, captions[::-1])
    rows.append(f"| text_similarity (MiniLM) | 256 caption pairs | {time.perf_counter() - t:.2f} | - | - |")
    return rows


if __name__ == "__main__":
    print("\n".join(models()))
    print()
    print("\n".join(metrics()))
