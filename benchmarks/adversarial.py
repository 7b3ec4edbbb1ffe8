"""Attack success of ``adversarial_texture`` on EfficientNet-Lite0 and its transfer to Lite1 / Lite2 (CPU).

Images: the ``objects`` dataset with one scene per object (94 images), first ``--limit`` of those that
Lite0 classifies correctly on the clean image (as ObjectCompose keeps only images its ensemble gets right).
Each is attacked through Lite0 (AdamW lr 0.1, 30 iterations, or fewer with --early-stop); the saved
uint8 images are then classified again by all three models.

    python benchmarks/adversarial.py --limit 24 [--early-stop] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=24, help="attacked images (correct on clean under Lite0)")
    ap.add_argument("--severity", type=int, default=5, help="5 = at most 30 iterations")
    ap.add_argument("--early-stop", action="store_true", help="stop each image as soon as Lite0 is fooled")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)  # one image at a time; a second thread only contends on a shared 2-core machine
    import shiftbench as sb

    ds = sb.load_dataset("objects", scenes_per_object=1)
    models = {f"efficientnet_lite{v}": sb.create_model(f"efficientnet_lite{v}") for v in (0, 1, 2)}
    shift = sb.create_shift("adversarial_texture", early_stop=args.early_stop)
    clean, adv, records, seconds = [], [], [], []
    for i in range(len(ds)):
        if len(clean) >= args.limit:
            break
        s = ds.load(i)
        if int(models["efficientnet_lite0"].predict_logits([s.image])[0].argmax()) != s.label:
            continue
        t = time.perf_counter()
        out = shift(s, severity=args.severity, seed=0)
        seconds.append(time.perf_counter() - t)
        assert np.array_equal(out.image[s.mask], s.image[s.mask])
        clean.append(s)
        adv.append(out)
        records.append(out.meta["attack"])
    labels = np.array([s.label for s in clean])
    rows = {}
    for name, model in models.items():
        c = np.array([model.predict_logits([s.image])[0].argmax() for s in clean]) == labels
        a = np.array([model.predict_logits([s.image])[0].argmax() for s in adv]) == labels
        rows[name] = {"clean_top1": float(c.mean()), "adversarial_top1": float(a.mean()),
                      "success_rate": float((c & ~a).sum() / max(c.sum(), 1)), "n_correct_clean": int(c.sum())}
    iters = np.array([r["iterations"] for r in records])
    result = {"images": len(clean), "severity": args.severity, "early_stop": args.early_stop, "per_model": rows,
              "iterations_mean": float(iters.mean()), "iterations_max": int(iters.max()),
              "seconds_per_image": float(np.mean(seconds))}
    print(f"{len(clean)} images correct on clean under Lite0; attack through Lite0 "
          f"({'early stop' if args.early_stop else 'full budget'}), <= {iters.max()} iterations "
          f"(mean {iters.mean():.1f}), {np.mean(seconds):.2f} s/image")
    print("| model | clean top-1 | adversarial top-1 | attack success (of clean-correct) |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {100 * r['clean_top1']:.1f} | {100 * r['adversarial_top1']:.1f} | "
              f"{100 * r['success_rate']:.1f} ({r['n_correct_clean']} images) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
