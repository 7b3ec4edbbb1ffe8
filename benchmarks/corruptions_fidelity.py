"""Fidelity of the corruptions to the reference (imagecorruptions 1.1.2), as tables for docs/corruptions.md.

    python benchmarks/corruptions_fidelity.py [--size 224] [--draws 3] [--json benchmarks/results/corruptions_fidelity.json]

Deterministic corruptions: mean absolute difference (grey levels) to the reference, worst photo,
per severity. Random corruptions: mean and standard deviation of (corrupted - clean) over photos
x draws, ours / reference, per severity. fog (whose large-scale fractal level varies a lot from draw
to draw) and frost (whose overlay is drawn among five) get 10x the draws.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from _reference import reference_corrupt  # noqa: E402
from corruptions import benchmark_photos  # noqa: E402

from shiftbench.registry import SHIFTS  # noqa: E402

DETERMINISTIC = ["defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression", "saturate", "gaussian_blur"]
RANDOM = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "glass_blur", "motion_blur", "snow", "frost", "fog",
          "elastic_transform", "spatter"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "corruptions_fidelity.json")
    args = parser.parse_args()
    import cv2

    photos = [cv2.resize(p, (args.size, args.size), interpolation=cv2.INTER_AREA) for p in benchmark_photos()[: args.photos]]
    result = {"size": args.size, "photos": len(photos), "draws": args.draws, "deterministic_mad": {}, "random_stats": {}}
    print("| corruption | MAD s1 | s2 | s3 | s4 | s5 |\n|---|---|---|---|---|---|")
    for name in DETERMINISTIC:
        shift = SHIFTS.create(name)
        mads = []
        for severity in range(1, 6):
            mads.append(max(float(np.abs(shift(im, severity=severity).astype(float) - reference_corrupt(im, name, severity)).mean())
                            for im in photos))
        result["deterministic_mad"][name] = mads
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in mads) + " |")
    print("\n| corruption | severity | mean ours | mean ref | std ours | std ref |\n|---|---|---|---|---|---|")
    for name in RANDOM:
        shift = SHIFTS.create(name)
        rows = []
        draws = args.draws * (10 if name in ("fog", "frost") else 1)
        for severity in range(1, 6):
            ours, ref = [], []
            for i, im in enumerate(photos):
                for k in range(draws):
                    ours.append(shift(im, severity=severity, seed=k, sample_id=str(i)).astype(np.float32) - im)
                    ref.append(reference_corrupt(im, name, severity, seed=1000 * i + k).astype(np.float32) - im)
            ours, ref = np.stack(ours), np.stack(ref)
            row = [float(ours.mean()), float(ref.mean()), float(ours.std()), float(ref.std())]
            rows.append(row)
            print(f"| {name} | {severity} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
        result["random_stats"][name] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
