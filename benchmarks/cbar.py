"""ImageNet-C-bar speed: shiftbench's vectorised corruptions against the per-pixel form, at 224 px, one core.

    python benchmarks/cbar.py [--photos 2] [--severity 3] [--json benchmarks/results/cbar.json]
    python benchmarks/cbar.py --quick [--json OUT]   # one photo, shiftbench only: never writes benchmarks/results/

The per-pixel form is the reference's procedure as its code runs it (a Python loop over pixels calling
the formula per pixel), here the transcriptions the tests compare against (tests/shifts/test_cbar_*.py),
which agree with shiftbench's output to the byte. Both sides take the same params, drawn once per photo by
shiftbench (the reference's own sampling is a few scalar draws, not what is timed). Photos: the first
``--photos`` of the 20 ``imagenet-photos`` (ImageNet validation JPEGs), resized to 224 x 224 (area).
Images per second of one thread (numba, OpenCV, BLAS and torch pinned to one); shiftbench: the best of
``--repeats`` passes after a warm-up; the per-pixel form: one pass (seconds per image).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cbar.json"

# corruption -> (test file, per-pixel function, how it takes the params)
PER_PIXEL = {
    "caustic_refraction": ("test_cbar_caustic.py", "per_pixel_caustic_refraction", "kwargs"),  # (image, counts)
    "inverse_sparkles": ("test_cbar_sparkles.py", "inverse_sparkles_per_pixel", "dict"),
    "sparkles": ("test_cbar_sparkles.py", "sparkles_per_pixel", "dict"),
    "perlin_noise": ("test_cbar_noise.py", "slow_perlin", "dict"),
    "blue_noise_sample": ("test_cbar_noise.py", "slow_blue_noise_sample", "dict"),
    "plasma_noise": ("test_cbar_waves.py", "pixel_plasma", "dict"),
    "checkerboard_cutout": ("test_cbar_sparkles.py", "checkerboard_per_pixel", "dict"),
    "cocentric_sine_waves": ("test_cbar_waves.py", "pixel_cocentric", "dict"),
    "single_frequency_greyscale": ("test_cbar_waves.py", "pixel_single_frequency", "dict"),
    "brownish_noise": ("test_cbar_noise.py", "slow_brownish_noise", "dict"),
}


def _one_thread() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"


def _per_pixel(name: str):
    file, function, style = PER_PIXEL[name]
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location(f"_cbar_ref_{Path(file).stem}", ROOT / "tests" / "shifts" / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, function)
    return (lambda image, p: fn(image, **p)[0]) if style == "kwargs" else fn


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=2)
    ap.add_argument("--severity", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one photo, shiftbench only (a smoke run)")
    ap.add_argument("--json", type=Path, default=None, help=f"where the results go (default: {RESULTS.relative_to(ROOT)}; "
                    "none with --quick)")
    args = ap.parse_args(argv)
    if args.quick and args.json is not None and args.json.resolve().is_relative_to((ROOT / "benchmarks" / "results").resolve()):
        ap.error("--quick never writes the committed results file; give another --json or none")
    out_json = args.json if (args.json is not None or args.quick) else RESULTS
    _one_thread()

    import cv2
    import numpy as np

    import shiftbench as sb
    from shiftbench.sample import Sample
    from shiftbench.shifts.cbar import CBAR_CORRUPTIONS

    cv2.setNumThreads(1)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    n = 1 if args.quick else args.photos
    data = sb.load_dataset("imagenet-photos")
    photos = [cv2.resize(data.load(i).image, (224, 224), interpolation=cv2.INTER_AREA) for i in range(n)]
    rows = []
    print(f"{'corruption':28s} {'shiftbench img/s':>17s} {'per-pixel img/s':>16s} {'speed-up':>9s}  agree")
    for name in CBAR_CORRUPTIONS:
        shift = sb.create_shift(name)
        params = [shift.draw(Sample(image=im, id=f"p{i}"), args.severity, seed=0) for i, im in enumerate(photos)]
        outs = [shift.apply_image(im, p) for im, p in zip(photos, params)]  # warm-up (numba compiles)
        best = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            for im, p in zip(photos, params):
                shift.apply_image(im, p)
            best = min(best, time.perf_counter() - t)
        ours = len(photos) / best
        row = {"corruption": name, "severity": args.severity, "photos": len(photos), "shiftbench_img_s": ours}
        if not args.quick:
            slow = _per_pixel(name)
            t = time.perf_counter()
            ref = [slow(im, p) for im, p in zip(photos, params)]
            seconds = time.perf_counter() - t
            diff = max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(outs, ref))
            row.update(per_pixel_img_s=len(photos) / seconds, speedup=ours * seconds / len(photos), max_diff=diff)
            print(f"{name:28s} {ours:17.1f} {row['per_pixel_img_s']:16.2f} {row['speedup']:8.0f}x  max |diff| {diff}")
        else:
            print(f"{name:28s} {ours:17.1f}")
        rows.append(row)
    result = {"rows": rows, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                        "python": platform.python_version(), "load_average": os.getloadavg()[0]}}
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out_json}")
    return result


if __name__ == "__main__":
    main()
