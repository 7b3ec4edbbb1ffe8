"""Engine overhead at scale: the same work on the local engine and on the Ray engine, printed as a table.

    python benchmarks/scale.py [--images 200] [--workers 2] [--shift-set common] [--severities 1-5]
                               [--json benchmarks/results/scale.json]

Generate: the 15 ImageNet-C corruptions x 5 severities on ``--images`` images (an image folder built
from the built-in ``objects`` photos: the 94 renders, then their mirror images, then again, so every
file is a real photograph and no two are the same file), written as PNG by ``shiftbench.generate``
with the local engine (``--workers`` processes) and with the Ray engine (a local cluster of
``--workers`` CPUs, started before the clock starts: a cluster is started once and serves many runs).
Both outputs are compared byte for byte, so the table also says the engines agree. The ratio is
local time / Ray time: 1.0 is no overhead, higher is faster on Ray.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def image_folder(root: Path, n: int) -> Path:
    """``n`` distinct PNG photos in class folders, from the built-in objects renders (and their mirrors)."""
    import numpy as np
    from PIL import Image

    import shiftbench as sb

    objects = sb.load_dataset("objects")
    for i in range(n):
        sample = objects.load(i % len(objects))
        image = sample.image
        flips = i // len(objects)
        if flips % 2:
            image = image[:, ::-1]
        if flips >= 2:
            image = np.rot90(image, flips // 2)
        folder = root / f"class{sample.label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(image)).save(folder / f"img{i:05d}.png")
    return root


def tree_equal(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)


def bench_generate(images: int, workers: int, shift_set: str, severities: str) -> dict:
    import ray

    from shiftbench.engine.generate import generate, parse_severities, resolve_shifts

    names = resolve_shifts([shift_set])
    levels = parse_severities(severities)
    with tempfile.TemporaryDirectory(prefix="shiftbench-scale-") as tmp:
        tmp = Path(tmp)
        source = image_folder(tmp / "source", images)
        n_out = len(names) * len(levels) * images
        # warm-up on two images: numba loads its cached kernels in this process, as a long run would have
        generate(str(source), names, levels[:1], tmp / "warm", limit=2)
        shutil.rmtree(tmp / "warm")

        start = time.perf_counter()
        generate(str(source), names, levels, tmp / "local", workers=workers)
        local_s = time.perf_counter() - start

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        try:
            start = time.perf_counter()
            generate(str(source), names, levels, tmp / "ray", workers=workers, engine="ray")
            ray_s = time.perf_counter() - start
        finally:
            ray.shutdown()
        same = tree_equal(tmp / "local", tmp / "ray")
        written = sum(p.stat().st_size for p in (tmp / "ray").rglob("*") if p.is_file())
    return {"task": f"generate {shift_set} ({len(names)}) x {len(levels)} severities on {images} images",
            "outputs": n_out, "workers": workers, "local_s": local_s, "ray_s": ray_s,
            "local_per_s": n_out / local_s, "ray_per_s": n_out / ray_s, "ratio": local_s / ray_s,
            "bytes_identical": same, "bytes_written": written}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shift-set", default="common")
    parser.add_argument("--severities", default="1-5")
    parser.add_argument("--json", default=None, help="Also write the results to this JSON file.")
    args = parser.parse_args()
    row = bench_generate(args.images, args.workers, args.shift_set, args.severities)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"| task | outputs | workers | local (s) | Ray (s) | local/s | Ray/s | ratio Ray/local | same bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {row['task']} | {row['outputs']} | {row['workers']} | {row['local_s']:.1f} | {row['ray_s']:.1f} | "
          f"{row['local_per_s']:.1f} | {row['ray_per_s']:.1f} | {row['ratio']:.2f} | "
          f"{'yes' if row['bytes_identical'] else 'NO'} |")
    print(f"bytes written per engine: {row['bytes_written'] / 1e6:.1f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps({"generate": row}, indent=1))


if __name__ == "__main__":
    main()
