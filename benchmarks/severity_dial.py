"""Continuous severities: how the change from the clean photo grows along the dial, for every image corruption.

    python benchmarks/severity_dial.py [--photos 20] [--step 0.125] [--json benchmarks/results/severity_dial.json]
    python benchmarks/severity_dial.py --quick [--json OUT]   # 2 photos, 4 corruptions: never writes benchmarks/results/

For each of ImageNet-C's 19 corruptions and ImageNet-C-bar's 10: the mean absolute difference from the clean
photo (grey levels, over the ``--photos`` first of the 20 ``imagenet-photos``, resized to 224 x 224) at
every severity of the grid 1, 1 + step, ..., 5, each photo with its own seed-0 draws. Between two consecutive
published levels the change should move monotonically from one level's value to the next (up where the
published levels grow, down on the four segments where they do not: glass_blur 1->2 and 3->4,
frost 3->4, saturate 2->3). The table gives, per corruption, the change at the five levels, the smallest step along the
grid in the direction of its segment (the worst case: negative would be a reversal) and the segments that
fall. Also: seconds per image at a whole and at an in-between severity (the dial costs nothing extra when
its tables are cached).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "severity_dial.json"
QUICK = ("gaussian_noise", "zoom_blur", "saturate", "sparkles")


def _photos(n: int):
    import cv2
    import numpy as np

    import shiftbench as sb

    ds = sb.load_dataset("imagenet-photos")
    out = []
    for i in range(min(n, len(ds))):
        s = ds[i]
        out.append((s.id, np.ascontiguousarray(cv2.resize(s.image, (224, 224), interpolation=cv2.INTER_AREA))))
    return out


def measure(name: str, photos, grid) -> dict:
    import numpy as np

    import shiftbench as sb

    shift = sb.create_shift(name)
    change = []
    for s in grid:
        change.append(float(np.mean([np.abs(shift(im, severity=s, seed=0, sample_id=sid).astype(np.float64) - im).mean()
                                     for sid, im in photos])))
    per_level = int(round(1 / (grid[1] - grid[0])))
    worst, falling = float("inf"), []
    for k in range(4):
        seg = change[per_level * k: per_level * (k + 1) + 1]
        sign = 1.0 if seg[-1] >= seg[0] else -1.0
        if sign < 0:
            falling.append(f"{k + 1}->{k + 2}")
        worst = min(worst, min(sign * (b - a) for a, b in zip(seg, seg[1:])))
    timing = {}
    sid, im = photos[0]
    for label, s in (("whole", 3), ("between", 2.5)):
        shift(im, severity=s, seed=0, sample_id=sid)  # warm the caches
        t0 = time.perf_counter()
        for _ in range(3):
            shift(im, severity=s, seed=0, sample_id=sid)
        timing[label] = (time.perf_counter() - t0) / 3
    return {"levels": [change[per_level * k] for k in range(5)], "worst_step": worst, "falling": falling,
            "curve": change, "seconds_whole": timing["whole"], "seconds_between": timing["between"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=20)
    ap.add_argument("--step", type=float, default=0.125)
    ap.add_argument("--quick", action="store_true", help="2 photos, 4 corruptions, step 0.25 (a smoke run)")
    ap.add_argument("--json", type=Path, default=None, help=f"where the results go (default: {RESULTS.relative_to(ROOT)}; "
                    "none with --quick)")
    args = ap.parse_args(argv)
    if args.quick and args.json is not None and args.json.resolve().is_relative_to((ROOT / "benchmarks" / "results").resolve()):
        ap.error("--quick never writes the committed results file; give another --json or none")
    out_json = args.json if (args.json is not None or args.quick) else RESULTS
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"
    import cv2

    cv2.setNumThreads(1)
    from shiftbench.severity import parse
    from shiftbench.shifts.corruptions import CORRUPTION_GROUPS
    from shiftbench.shifts.groups import group_members

    step = 0.25 if args.quick else args.step
    grid = list(parse(f"1-5:{step}"))
    photos = _photos(2 if args.quick else args.photos)
    names = list(QUICK) if args.quick else list(CORRUPTION_GROUPS["all"]) + group_members("cbar")
    rows = {}
    print(f"{len(photos)} photos at 224 px, severities 1..5 in steps of {step} ({len(grid)} points)\n")
    print("| corruption | change at 1 / 2 / 3 / 4 / 5 | smallest step | falling segments | s/img whole | s/img 2.5 |")
    print("|---|---|---|---|---|---|")
    for name in names:
        r = rows[name] = measure(name, photos, grid)
        print(f"| {name} | {' / '.join(f'{v:.2f}' for v in r['levels'])} | {r['worst_step']:+.4f} | "
              f"{', '.join(r['falling']) or '-'} | {r['seconds_whole']:.4f} | {r['seconds_between']:.4f} |", flush=True)
    worst = min(rows, key=lambda n: rows[n]["worst_step"])
    print(f"\nworst case: {worst}, smallest step {rows[worst]['worst_step']:+.4f} grey levels "
          f"({'no reversal' if rows[worst]['worst_step'] >= 0 else 'a reversal'})")
    result = {"photos": len(photos), "step": step, "grid": grid, "corruptions": rows,
              "worst": {"corruption": worst, "step": rows[worst]["worst_step"]},
              "machine": {"python": sys.version.split()[0], "platform": platform.platform()}}
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out_json}")
    return result


if __name__ == "__main__":
    main()
