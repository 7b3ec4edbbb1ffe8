"""Benchmark: metric state written to the store, cumulative (the old runner) vs per batch (now), for box_ap.

1,000 images, batch 32, 100 detections per image and 7 ground-truth boxes: the old runner serialised the
running total after every batch (bytes grow with the square of the images seen); the runner now saves each
batch's state alone and merges. Prints bytes written, seconds serialising (encode_state + canonical JSON,
what ``Store.save_batch`` writes), and the seconds to merge the saved batches back and compute.

    python benchmarks/metric_state.py [--images 1000] [--batch 32] [--detections 100]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from shiftbench.metrics.base import OrderedMerge
from shiftbench.registry import METRICS
from shiftbench.results.codec import decode_state, encode_state
from shiftbench.results.store import canonical_json


def _image(rng, detections: int) -> tuple[dict, dict]:
    g = 7
    xy = rng.uniform(0, 500, (g, 2))
    gt = {"boxes": np.concatenate([xy, xy + rng.uniform(8, 120, (g, 2))], 1), "labels": rng.integers(0, 80, g),
          "iscrowd": np.zeros(g, bool)}
    dxy = rng.uniform(0, 500, (detections, 2))
    dt = {"boxes": np.concatenate([dxy, dxy + rng.uniform(8, 120, (detections, 2))], 1),
          "scores": rng.random(detections), "labels": rng.integers(0, 80, detections)}
    return dt, gt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--detections", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = [_image(rng, args.detections) for _ in range(args.images)]
    batches = [data[i:i + args.batch] for i in range(0, len(data), args.batch)]

    # before: one metric accumulates; its whole state is serialised after every batch
    cumulative = METRICS.create("box_ap")
    before_bytes, before_s = 0, 0.0
    for part in batches:
        cumulative.update([d for d, _ in part], [g for _, g in part])
        t = time.perf_counter()
        before_bytes += len(canonical_json(encode_state(cumulative.state_dict())))
        before_s += time.perf_counter() - t

    # after: each batch scored by a fresh metric, its state alone serialised, the parts merged in order
    template = METRICS.create("box_ap")
    merger = OrderedMerge(template)
    saved = []
    after_bytes, after_s = 0, 0.0
    for b, part in enumerate(batches):
        metric = template.fresh()
        metric.update([d for d, _ in part], [g for _, g in part])
        t = time.perf_counter()
        text = canonical_json(encode_state(metric.state_dict()))
        after_s += time.perf_counter() - t
        after_bytes += len(text)
        saved.append(text)
        merger.add(b, metric)
    t = time.perf_counter()
    resumed = OrderedMerge(template)  # what a resume does: decode every saved batch and merge
    for b, text in enumerate(saved):
        part = template.fresh()
        part.load_state_dict(decode_state(json.loads(text)))
        resumed.add(b, part)
    restore_s = time.perf_counter() - t
    t = time.perf_counter()
    values = resumed.result(len(batches)).compute()
    compute_s = time.perf_counter() - t
    assert values == cumulative.compute() == merger.result(len(batches)).compute()

    print(f"box_ap, {args.images} images, batch {args.batch}, {args.detections} detections per image")
    print(f"{'state':<28}{'MB written':>12}{'s serialising':>15}")
    print(f"{'cumulative (before)':<28}{before_bytes / 1e6:>12.1f}{before_s:>15.2f}")
    print(f"{'per batch (now)':<28}{after_bytes / 1e6:>12.1f}{after_s:>15.2f}")
    print(f"ratio: {before_bytes / after_bytes:.1f}x fewer bytes, {before_s / max(after_s, 1e-9):.1f}x less time")
    print(f"resume: decode + merge of {len(batches)} saved batches {restore_s:.2f} s; compute {compute_s:.2f} s; "
          "values identical")


if __name__ == "__main__":
    main()
