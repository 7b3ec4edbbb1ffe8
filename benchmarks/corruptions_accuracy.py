"""EfficientNet-Lite0 top-1 on `objects` under each corruption: shiftbench's output against the reference's.

    python benchmarks/corruptions_accuracy.py [--limit N] [--severities 3 5] [--json PATH]

For each of the 15 ImageNet-C corruptions and each severity, both implementations corrupt the same
images (ours seeded per sample; the reference with its own global-state randomness, seeded once per
image for repeatability), the bundled EfficientNet-Lite0 classifies both, and the table gives the two
top-1 accuracies and their difference (target: within 3 points). The reference is imagecorruptions
1.1.2 with the shims of tests/_reference.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import shiftbench as sb  # noqa: E402
from shiftbench.shifts.corruptions import COMMON_CORRUPTIONS  # noqa: E402


def main() -> None:
    from _reference import reference_available, reference_corrupt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--severities", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--corruptions", nargs="+", default=COMMON_CORRUPTIONS, help="default: the 15")
    parser.add_argument("--json", default="benchmarks/results/corruptions_accuracy.json")
    args = parser.parse_args()
    if not reference_available():
        sys.exit("needs the reference: pip install imagecorruptions==1.1.2 scikit-image scipy")
    data = sb.load_dataset("objects", limit=args.limit)
    samples = [data.load(i) for i in range(len(data))]
    labels = np.array([s.label for s in samples])
    model = sb.create_model("efficientnet_lite0")

    def top1(images: list[np.ndarray]) -> float:
        preds = np.concatenate([model.predict_logits(images[i:i + 32]).argmax(1) for i in range(0, len(images), 32)])
        return float((preds == labels).mean())

    clean = top1([s.image for s in samples])
    print(f"EfficientNet-Lite0 on objects ({len(samples)} images), clean top-1 {100 * clean:.1f}%")
    print(f"{'corruption':<20}{'sev':>4}{'ours':>8}{'reference':>11}{'diff':>8}")
    rows = []
    start = time.perf_counter()
    for name in args.corruptions:
        shift = sb.create_shift(name)
        for severity in args.severities:
            ours = [shift(s, severity=severity, seed=0).image for s in samples]
            ref = [reference_corrupt(s.image, name, severity, seed=i) for i, s in enumerate(samples)]
            a, b = top1(ours), top1(ref)
            rows.append({"corruption": name, "severity": severity, "ours": a, "reference": b, "diff": a - b})
            print(f"{name:<20}{severity:>4}{100 * a:>8.1f}{100 * b:>11.1f}{100 * (a - b):>+8.1f}", flush=True)
    worst = max(rows, key=lambda r: abs(r["diff"]))
    mean_abs = float(np.mean([abs(r["diff"]) for r in rows]))
    print(f"largest difference: {worst['corruption']} s{worst['severity']} {100 * worst['diff']:+.1f} points; "
          f"mean |diff| {100 * mean_abs:.2f} points; {sum(abs(r['diff']) <= 0.03 for r in rows)}/{len(rows)} "
          f"within 3 points ({time.perf_counter() - start:.0f} s)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"images": len(samples), "clean": clean, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
