"""Throughput of ``generate --protocol imagenet-c`` against the reference procedure, in images per second per core.

    python benchmarks/imagenet_c_preset.py [--photos imagenet-photos] [--repeats 3]
                                           [--json benchmarks/results/imagenet_c_preset.json]
    python benchmarks/imagenet_c_preset.py --quick   # a smoke run: prints, never writes the results file

Both sides run in this one process on one core (OpenCV, numba, BLAS and torch pinned to one thread) on the same
photographs, copied byte for byte into an ImageNet-style folder (``<wnid>/<file>.jpg``; the 20 photos of
``imagenet-photos``, or ``objects`` encoded as JPEG when foolbox is not installed), end to end from the files
on disk to the files written:

- shiftbench: ``generate(folder, [corruption], [severity], out, protocol="imagenet-c")`` (resize 256 bilinear,
  centre crop 224, the corruption, JPEG quality 85 optimize, ``<corruption>/<severity>/<wnid>/<file>``; the
  manifest and settings file included), and the same with ``image_format="png"``;
- the reference: make_imagenet_c.py's steps with ``imagecorruptions.corrupt`` (1.1.2, made importable by
  tests/_reference.py): PIL open + convert RGB, torchvision's Resize(256) + CenterCrop(224) done with Pillow,
  ``corrupt(array, severity, name)``, ``Image.fromarray(np.uint8(x)).save(path, quality=85, optimize=True)``.

Each figure is the best of ``--repeats`` passes over all photos, after one warm-up pass (numba loads its
cached kernels); the passes of the three sides are interleaved, so that a busy spell of a shared machine falls
on all of them alike. The main figure is images per CPU-second of this one-threaded process (images per second per
core), which a busy machine disturbs far less than wall time; images per wall-clock second are in brackets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # one core: set before numpy, numba and OpenCV are imported (not when a test imports this)
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = "1"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

RESULTS = ROOT / "benchmarks" / "results" / "imagenet_c_preset.json"
CORRUPTIONS = ("gaussian_noise", "motion_blur", "fog", "jpeg_compression")


def photo_folder(root: Path, source: str, limit: int | None) -> tuple[Path, str]:
    """The photos as ``root/<wnid>/<name>.jpg``: imagenet-photos' files copied byte for byte, else ``objects``
    encoded as JPEG quality 95. Returns the folder and what it holds."""
    import shiftbench as sb

    if source == "imagenet-photos":
        try:
            ds = sb.load_dataset("imagenet-photos")
        except sb.ShiftbenchError:
            source = "objects"
    if source == "imagenet-photos":
        for i in range(len(ds) if limit is None else min(limit, len(ds))):
            target = root / ds.class_file_path(i)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ds.load(i).meta["path"], target)
        return root, f"imagenet-photos ({len(list(root.rglob('*.jpg')))} ImageNet validation photos, JPEG)"
    from PIL import Image

    ds = sb.load_dataset("objects")
    n = 20 if limit is None else limit
    for i in range(n):
        s = ds.load(i)
        target = root / s.meta["wnid"] / f"{s.id.replace('/', '_').replace('@', '_')}.jpg"
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(s.image).save(target, quality=95)
    return root, f"objects ({n} scenes, 224x224, JPEG quality 95)"


def reference_pass(files: list[Path], root: Path, out: Path, name: str, severity: int) -> None:
    """make_imagenet_c.py's steps for every file, with imagecorruptions' ``corrupt``."""
    from imagecorruptions import corrupt
    from PIL import Image

    for path in files:
        with Image.open(path) as img:
            img = img.convert("RGB")
            w, h = img.size
            size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
            img = img.resize(size, Image.BILINEAR)
            top, left = int(round((size[1] - 224) / 2.0)), int(round((size[0] - 224) / 2.0))
            img = img.crop((left, top, left + 224, top + 224))
        with np.errstate(all="ignore"):
            x = corrupt(np.asarray(img), severity=severity, corruption_name=name)
        target = out / name / str(severity) / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.uint8(x)).save(target, quality=85, optimize=True)


class _Pass:
    """One pass over every photo into a fresh folder (``last``: the latest one)."""

    def __init__(self, run, tmp: Path, label: str):
        self.run, self.tmp, self.label, self.count, self.last = run, tmp, label, 0, tmp

    def __call__(self) -> None:
        self.count += 1
        self.last = self.tmp / f"{self.label}-{self.count}"
        self.run(self.last)


def _ours(generate, root: Path, tmp: Path, name: str, severity: int, fmt: str | None) -> _Pass:
    return _Pass(lambda out: generate(str(root), [name], [severity], out, protocol="imagenet-c", image_format=fmt),
                 tmp, f"{fmt or 'jpeg'}-{name}")


def _reference(files: list[Path], root: Path, tmp: Path, name: str, severity: int) -> _Pass:
    return _Pass(lambda out: reference_pass(files, root, out, name, severity), tmp, f"ref-{name}")


def timed(call, repeats: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of one call over ``repeats`` calls."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", default="imagenet-photos", choices=["imagenet-photos", "objects"])
    parser.add_argument("--corruptions", nargs="*", default=list(CORRUPTIONS))
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure (the best is kept)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 6 photos, 2 corruptions, 1 pass; prints only (never the results file)")
    parser.add_argument("--json", type=Path, default=None,
                        help=f"where the results go (default: {RESULTS.relative_to(ROOT)}; none with --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        if args.json is not None and args.json.resolve() == RESULTS.resolve():
            parser.error("--quick never writes the committed results file; give another --json or none")
        args.corruptions, args.repeats, limit = args.corruptions[:2], 1, 6
    else:
        limit = None
        args.json = args.json or RESULTS

    import cv2

    cv2.setNumThreads(1)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    from shiftbench.engine.generate import generate

    reference_error = None
    try:
        from _reference import reference_available, reference_module

        if not reference_available():
            raise ImportError("imagecorruptions, scikit-image or scipy is not installed (pip install -e '.[dev]')")
        reference_module()  # the shims that make imagecorruptions 1.1.2 import on today's numpy and setuptools
        import imagecorruptions  # noqa: F401
    except ImportError as exc:
        reference_error = str(exc)

    load_before = round(os.getloadavg()[0], 2)  # the machine's business beside this run, recorded with the results
    with tempfile.TemporaryDirectory(prefix="imagenet-c-bench-") as tmp:
        tmp = Path(tmp)
        root, photos = photo_folder(tmp / "photos", args.photos, limit)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        n = len(files)
        rows = []
        for name in args.corruptions:
            row: dict = {"corruption": name, "severity": args.severity}
            sides = {"shiftbench_jpeg": _ours(generate, root, tmp, name, args.severity, None),
                     "shiftbench_png": _ours(generate, root, tmp, name, args.severity, "png")}
            if reference_error is None:
                sides["reference_jpeg"] = _reference(files, root, tmp, name, args.severity)
            for call in sides.values():  # warm-up: numba's cached kernels, imports, the file cache
                call()
            times: dict[str, list[tuple[float, float]]] = {key: [] for key in sides}
            for _ in range(args.repeats):  # interleaved: a busy spell of the machine falls on every side alike
                for key, call in sides.items():
                    times[key].append(timed(call, 1))
            for key, call in sides.items():
                wall, cpu = min(t[0] for t in times[key]), min(t[1] for t in times[key])
                row[key] = {"images_per_s": n / wall, "images_per_cpu_s": n / cpu,
                            "bytes_per_image": folder_bytes(call.last / name) / n}
            rows.append(row)
            print(f"  {name}: done", file=sys.stderr)

    result = {"photos": photos, "images": n, "severity": args.severity, "repeats": args.repeats,
              "threads": 1, "load_average_1min": [load_before, round(os.getloadavg()[0], 2)],
              "reference": reference_error or "imagecorruptions 1.1.2 corrupt + PIL save(quality=85, "
              "optimize=True)", "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}", "rows": rows}
    print_table(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return result


def markdown_table(result: dict) -> str:
    """The results as the Markdown table docs/preprocess.md quotes: images per CPU-second (per wall-clock second
    in brackets) and kB per image, for each side."""
    ref = bool(result["rows"]) and "reference_jpeg" in result["rows"][0]
    keys = ("shiftbench_jpeg", "shiftbench_png") + (("reference_jpeg",) if ref else ())
    lines = ["| corruption (severity 3) | shiftbench, JPEG q85 | shiftbench, PNG |"
             + (" reference (imagecorruptions + Pillow), JPEG q85 |" if ref else ""),
             "|---|---|---|" + ("---|" if ref else "")]
    for row in result["rows"]:
        cells = [f"{row[k]['images_per_cpu_s']:.0f} ({row[k]['images_per_s']:.0f}), {row[k]['bytes_per_image'] / 1e3:.1f} kB"
                 for k in keys]
        lines.append(f"| {row['corruption']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_table(result: dict) -> None:
    print(f"{result['images']} photos: {result['photos']}; severity {result['severity']}; one core; best of "
          f"{result['repeats']} pass(es); images per CPU-second (per wall-clock second in brackets), kB per image")
    print(markdown_table(result))
    if result["rows"] and "reference_jpeg" not in result["rows"][0]:
        print(f"reference not run: {result['reference']}")


if __name__ == "__main__":
    main()
