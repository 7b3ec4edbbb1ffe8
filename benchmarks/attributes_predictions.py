"""What the classifiers see under each attribute edit: top-1, top-5 and the most frequent predicted classes.

The ``objects`` renders with one scene per object (94 images), each of Pascal-EA's 12 edits at severity 5
on the classic backend (seed 0, as configs/objects_attributes.yaml), the three bundled classifiers. Top-1
and top-5 are means over the three models; the predictions are pooled over them (3 x 94 per edit). Shows
whether a failed image is read as another object of similar shape or as the new texture's usual owner.

    python benchmarks/attributes_predictions.py [--limit N] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="first N images (default: all 94)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import shiftbench as sb
    from shiftbench.report.pascal_ea import ATTRIBUTE_COLUMNS

    ds = sb.load_dataset("objects", scenes_per_object=1)
    models = [sb.create_model(f"efficientnet_lite{v}") for v in (0, 1, 2)]
    samples = [ds.load(i) for i in range(len(ds) if args.limit is None else min(args.limit, len(ds)))]
    labels = np.array([s.label for s in samples])
    conditions = [("clean", None, None)] + [(v, f"attribute_{f}", {f: v}) for f, v in ATTRIBUTE_COLUMNS]
    out = {}
    start = time.perf_counter()
    print("| edit | top-1 | top-5 | distinct predictions | most frequent predictions (of 3 x n) |")
    print("|---|---|---|---|---|")
    for value, shift, params in conditions:
        if shift is None:
            images = [s.image for s in samples]
        else:
            edit = sb.create_shift(shift, **params)
            images = [edit(s, severity=5, seed=0).image for s in samples]
        top1, top5, preds = [], [], collections.Counter()
        for model in models:
            logits = np.concatenate([model.predict_logits(images[i:i + 16]) for i in range(0, len(images), 16)])
            best = np.argsort(-logits, axis=1)[:, :5]
            top1.append(float((best[:, 0] == labels).mean()))
            top5.append(float((best == labels[:, None]).any(axis=1).mean()))
            preds.update(ds.class_names[k] for k in best[:, 0])
        out[value] = {"top1": 100 * float(np.mean(top1)), "top5": 100 * float(np.mean(top5)),
                      "distinct": len(preds), "most_common": preds.most_common(6)}
        print(f"| {value} | {out[value]['top1']:.1f} | {out[value]['top5']:.1f} | {len(preds)} | "
              + ", ".join(f"{k} {c}" for k, c in preds.most_common(4)) + " |", flush=True)
    print(f"{time.perf_counter() - start:.0f} s for {len(samples)} images x {len(conditions)} conditions x 3 models")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"images": len(samples), "conditions": out}, fh, indent=1)


if __name__ == "__main__":
    main()
