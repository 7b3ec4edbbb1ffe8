"""Speed of the ImageNet-C corruptions: shiftbench against the reference (imagecorruptions), side by side.

    python benchmarks/corruptions.py [--severity 3] [--repeats 7] [--json benchmarks/results/corruptions.json]

Both run in this one process on the same real 224x224 photographs (scikit-image's samples, centre
crops), through their public calls: ``shift(image, severity=s, seed=k)`` for shiftbench (params
drawn, then applied) and the reference function on a PIL image. Each corruption is warmed up
first (numba loads its cached kernels, noise tables are built); the first-call time is reported
separately. Times are medians (and bests) of single calls over repeats x images, in ms per
image: on a shared machine the median is the robust figure; a quiet machine gives steadier ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from shiftbench.registry import SHIFTS  # noqa: E402
from shiftbench.shifts.corruptions import COMMON_CORRUPTIONS, CORRUPTION_GROUPS  # noqa: E402


def benchmark_photos(size: int = 224) -> list[np.ndarray]:
    import cv2
    from skimage import data

    out = []
    for load in (data.astronaut, data.chelsea, data.coffee, data.rocket, data.cat, data.retina):
        im = load()
        h, w = im.shape[:2]
        side = min(h, w)
        im = im[(h - side) // 2 : (h - side) // 2 + side, (w - side) // 2 : (w - side) // 2 + side]
        out.append(np.ascontiguousarray(cv2.resize(im[..., :3], (size, size), interpolation=cv2.INTER_AREA)))
    return out


def time_per_image(call, images: list[np.ndarray], repeats: int) -> tuple[float, float]:
    """(median, best) time of one call in ms, over ``repeats`` passes through all images.

    Each call is timed on its own: on a shared machine a pass can be pre-empted for several ms,
    and the median over single calls keeps such stalls out of every figure.
    """
    times = []
    for r in range(repeats):
        for k, im in enumerate(images):
            start = time.perf_counter()
            call(im, r * len(images) + k)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7, help="passes over the images for shiftbench (median)")
    parser.add_argument("--reference-repeats", type=int, default=3, help="passes for the reference (glass_blur is ~1 s per image)")
    parser.add_argument("--names", nargs="*", default=CORRUPTION_GROUPS["all"], help="corruptions to time")
    parser.add_argument("--no-reference", action="store_true", help="time shiftbench only")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "corruptions.json")
    args = parser.parse_args(argv)

    images = benchmark_photos()
    reference = None
    if not args.no_reference:
        from _reference import reference_available, reference_corrupt

        if reference_available():
            reference = reference_corrupt
        else:
            print("reference (imagecorruptions + scikit-image) not installed: timing shiftbench only")

    rows = []
    for name in args.names:
        shift = SHIFTS.create(name)
        start = time.perf_counter()
        shift(images[0], severity=args.severity, seed=0)
        first_call = (time.perf_counter() - start) * 1e3
        for im in images:  # warm-up pass
            shift(im, severity=args.severity, seed=0)
        ours, best = time_per_image(lambda im, k: shift(im, severity=args.severity, seed=k), images, args.repeats)
        row = {"name": name, "group": SHIFTS.entry(name).meta.get("group"), "ours_ms": ours, "ours_best_ms": best,
               "first_call_ms": first_call}
        if reference is not None:
            reference(images[0], name, args.severity, seed=0)  # warm-up (imports, frost files)
            ref, ref_best = time_per_image(lambda im, k: reference(im, name, args.severity, seed=k), images, args.reference_repeats)
            row.update(reference_ms=ref, reference_best_ms=ref_best, speedup=ref / ours)
        rows.append(row)
        print_row(row)

    summary = {}
    for label, names in (("sum of 15", COMMON_CORRUPTIONS), ("sum of 19", CORRUPTION_GROUPS["all"])):
        chosen = [r for r in rows if r["name"] in names]
        if len(chosen) != len(names):
            continue
        total = {"name": label, "ours_ms": sum(r["ours_ms"] for r in chosen), "ours_best_ms": sum(r["ours_best_ms"] for r in chosen)}
        if reference is not None:
            total["reference_ms"] = sum(r["reference_ms"] for r in chosen)
            total["reference_best_ms"] = sum(r["reference_best_ms"] for r in chosen)
            total["speedup"] = total["reference_ms"] / total["ours_ms"]
        summary[label] = total
        print_row(total)

    import cv2
    import numba

    result = {
        "severity": args.severity,
        "image_size": [224, 224],
        "images": len(images),
        "repeats": args.repeats,
        "reference_repeats": args.reference_repeats,
        "statistic": "ms per image: median (*_ms) and best (*_best_ms) of single calls over repeats x images",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "opencv": cv2.__version__,
            "opencv_threads": cv2.getNumThreads(),
            "numba": numba.__version__,
        },
        "rows": rows,
        "summary": summary,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


def print_row(row: dict) -> None:
    if not hasattr(print_row, "header"):
        print(f"{'corruption':20s} {'shiftbench ms':>14s} {'(best)':>8s} {'reference ms':>13s} {'speed-up':>9s} {'first call ms':>14s}")
        print_row.header = True
    ref = f"{row['reference_ms']:13.2f}" if "reference_ms" in row else f"{'-':>13s}"
    speed = f"{row['speedup']:8.1f}x" if "speedup" in row else f"{'-':>9s}"
    first = f"{row['first_call_ms']:14.1f}" if "first_call_ms" in row else ""
    print(f"{row['name']:20s} {row['ours_ms']:14.3f} {row['ours_best_ms']:8.3f} {ref} {speed} {first}")


if __name__ == "__main__":
    main()
