"""Engine overhead at scale: the same work on the local engine and on the Ray engine, printed as a table.

    python benchmarks/scale.py [--only generate|evaluate|memory] [--images 200] [--workers 2]
                               [--shift-set common] [--severities 1-5] [--json benchmarks/results/scale.json]
    python benchmarks/scale.py --quick [...] [--json OUT]   # a smoke run: never writes benchmarks/results/

Generate: the 15 ImageNet-C corruptions x 5 severities on ``--images`` images (an image folder built
from the built-in ``objects`` photos: the 94 renders, then their mirror images, then again, so every
file is a real photograph and no two are the same file), written as PNG by ``shiftbench.generate``
with the local engine (``--workers`` processes) and with the Ray engine (a local cluster of
``--workers`` CPUs, started before the clock starts: a cluster is started once and serves many runs).
Both outputs are compared byte for byte, so the table also says the engines agree. The ratio is
local time / Ray time: 1.0 is no overhead, higher is faster on Ray.

Evaluate: the demo's corruption part, ``configs/demo.yaml`` as it is (its three EfficientNet-Lite
classifiers, 64 ``objects`` images, clean + the 15 corruptions x 5 severities), plus the 12 compose
background conditions the demo held before its ObjectCompose part became a run of its own
(``BACKGROUNDS``, the adversarial attack included) = 88 conditions, with ``shiftbench.evaluate`` on the local engine (this process)
and on the Ray engine (actors on a local cluster of ``--workers`` CPUs started before the clock; the
actors' setup, each loading the three models, is inside the clock). Every result row is compared
(values equal, not close). ``--quick``: clean + 3 corruptions at severity 3 (a smoke run; its ``--json``
may not name a file under ``benchmarks/results/``: the committed results are never overwritten).

Memory: the driver's peak RSS (``ru_maxrss`` of a fresh process per run) of ``evaluate`` with
``dummy_classifier`` on an image folder of 1,000 and 20,000 small photos (clean + brightness),
local and Ray engines. Flat across sizes means the driver holds nothing per sample.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import subprocess
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
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



def _rows_key(rows: list[dict]) -> list[tuple]:
    """Rows without their run id, as comparable tuples (every value, the extra info included)."""
    return [tuple(json.dumps(r[k], sort_keys=True) for k in sorted(r) if k != "run_id") for r in rows]


# the 12 background conditions measured with the corruptions (the demo's single run held them until its
# ObjectCompose part, configs/demo_objectcompose.yaml, became a curated run of its own)
BACKGROUNDS = [
    {"name": "background_scene", "severity": 5},
    *({"name": "background_color", "severity": 5, "params": {"color": c}} for c in ("red", "green", "blue", "colorful")),
    *({"name": "background_texture", "severity": 5, "params": {"texture": t}} for t in (1, 2, 3, 4)),
    {"name": "object_only", "severity": 5},
    {"name": "background_only"},
    {"name": "adversarial_texture", "severity": 5, "params": {"early_stop": True}},
]


def demo_classification_spec(quick: bool, severities: list[int] | None = None) -> dict:
    """configs/demo.yaml as it is plus ``BACKGROUNDS`` (``--quick``: clean + 3 corruptions at severity 3;
    ``severities``: every corruption at those severities only, the background conditions kept)."""
    import yaml

    from shiftbench.engine.generate import resolve_shifts

    spec = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    common = set(resolve_shifts(["common"]))
    shifts = spec["shifts"] + [dict(b) for b in BACKGROUNDS]
    if severities:
        shifts = [{**s, "severities": list(severities)} if isinstance(s, dict) and s["name"] in common else s
                  for s in shifts]
    if quick:
        corruptions = [s for s in shifts if isinstance(s, dict) and s["name"] in common]
        shifts = ["clean"] + [{"name": s["name"], "severities": [3]} for s in corruptions[:3]]
    spec["shifts"] = shifts
    return spec


def n_conditions(spec: dict) -> int:
    return sum(1 if s == "clean" else len(s.get("severities", [s.get("severity", 1)])) for s in spec["shifts"])


def bench_evaluate(workers: int, quick: bool, severities: list[int] | None = None) -> dict:
    import ray

    from shiftbench.engine.evaluate import evaluate
    from shiftbench.results.store import Store

    load_before = os.getloadavg()[0]
    spec = demo_classification_spec(quick, severities)
    conditions = n_conditions(spec)
    n_images = spec["limit"] * conditions * len(spec["models"])
    with tempfile.TemporaryDirectory(prefix="shiftbench-scale-") as tmp:
        tmp = Path(tmp)
        # warm-up: torch, the model code and the weight files in the page cache, as a long run would have
        evaluate({**spec, "limit": 2, "shifts": ["clean"]}, tmp / "warm.db")

        start = time.perf_counter()
        local = evaluate(spec, tmp / "local.db")
        local_s = time.perf_counter() - start

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        try:
            start = time.perf_counter()
            remote = evaluate(spec, tmp / "ray.db", engine="ray", workers=workers)
            ray_s = time.perf_counter() - start
        finally:
            ray.shutdown()
        same = _rows_key(local) == _rows_key(remote)
        local_store, ray_store = Store(tmp / "local.db"), Store(tmp / "ray.db")
        try:
            same_predictions = (local_store.predictions(local[0]["run_id"])
                                == ray_store.predictions(remote[0]["run_id"]))
        finally:
            local_store.close()
            ray_store.close()
    return {"task": f"evaluate demo classification: {len(spec['models'])} EfficientNet-Lite x {conditions} "
                    f"conditions x {spec['limit']} images" + (" (quick)" if quick else "")
                    + (f" (severities {','.join(map(str, severities))})" if severities and not quick else ""),
            "images": n_images, "workers": workers, "local_s": local_s, "ray_s": ray_s,
            "local_per_s": n_images / local_s, "ray_per_s": n_images / ray_s, "ratio": local_s / ray_s,
            "rows": len(local), "rows_identical": same, "predictions_identical": same_predictions,
            "conditions": conditions, "load_before": load_before, "load_after": os.getloadavg()[0]}


def small_photo_folder(root: Path, n: int, size: int = 48) -> Path:
    """``n`` small PNG photos (the ``objects`` renders shrunk, mirrored on odd rounds) in 10 class folders."""
    from PIL import Image

    import shiftbench as sb

    objects = sb.load_dataset("objects")
    base = [Image.fromarray(objects.load(i).image).resize((size, size), Image.BILINEAR) for i in range(len(objects))]
    for c in range(10):
        (root / f"c{c}").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        image = base[i % len(base)]
        if (i // len(base)) % 2:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        image.save(root / f"c{i % 10}" / f"img{i:05d}.png", compress_level=1)
    return root


def memory_spec(folder: Path, n: int) -> dict:
    return {"name": "memory", "dataset": str(folder), "limit": n, "seed": 0, "batch_size": 32,
            "models": [{"name": "dummy_classifier", "params": {"label_space": [f"c{c}" for c in range(10)]}}],
            "metrics": ["top1", "ece"], "shifts": ["clean", {"name": "brightness", "severity": 1}]}


def memory_child(folder: str, n: int, engine: str, workers: int, trace: bool) -> None:
    """Runs in a fresh process: one evaluate, then prints its peak RSS (and, with ``trace``, what grew)."""
    from shiftbench.engine.evaluate import evaluate

    if trace:
        import tracemalloc

        tracemalloc.start(10)
    with tempfile.TemporaryDirectory(prefix="shiftbench-mem-") as tmp:
        start = time.perf_counter()
        rows = evaluate(memory_spec(Path(folder), n), Path(tmp) / "results.db", engine=engine,
                        workers=workers if engine == "ray" else None)
        seconds = time.perf_counter() - start
    out = {"engine": engine, "samples": n, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "seconds": seconds, "rows": len(rows)}
    if trace:
        import tracemalloc

        current, peak = tracemalloc.get_traced_memory()
        out["traced_peak_mb"] = peak / 2**20
        out["top"] = [str(s) for s in tracemalloc.take_snapshot().statistics("lineno")[:8]]
    print("RESULT " + json.dumps(out))


def bench_memory(workers: int, sizes: tuple[int, ...] = (1000, 20000), trace: bool = False) -> dict:
    results = []
    with tempfile.TemporaryDirectory(prefix="shiftbench-scale-") as tmp:
        folder = small_photo_folder(Path(tmp) / "photos", max(sizes))
        for engine in ("local", "ray"):
            for n in sizes:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", str(folder), "--samples", str(n),
                       "--engine", engine, "--workers", str(workers)] + (["--trace"] if trace else [])
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode or not lines:
                    raise SystemExit(f"memory run {engine} {n} failed:\n{proc.stderr[-3000:]}")
                results.append(json.loads(lines[-1][len("RESULT "):]))
    by = {(r["engine"], r["samples"]): r for r in results}
    small, large = min(sizes), max(sizes)
    return {"task": f"driver peak RSS, dummy_classifier, clean + brightness, {small} vs {large} photos (48 px PNG)",
            "runs": results,
            "ray_growth_mb": by[("ray", large)]["peak_rss_mb"] - by[("ray", small)]["peak_rss_mb"],
            "local_growth_mb": by[("local", large)]["peak_rss_mb"] - by[("local", small)]["peak_rss_mb"],
            "load_before": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("generate", "evaluate", "memory"), default=None,
                        help="Run one part (default: all three).")
    parser.add_argument("--quick", action="store_true", help="Evaluate: clean + 3 corruptions (a smoke run).")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shift-set", default="common")
    parser.add_argument("--severities", default="1-5")
    parser.add_argument("--eval-severities", default=None,
                        help="Evaluate: run every corruption at these severities only (e.g. 3); default 1-5.")
    parser.add_argument("--sizes", default="1000,20000", help="Memory: sample counts, comma separated.")
    parser.add_argument("--trace", action="store_true", help="Memory: also report tracemalloc's top lines.")
    parser.add_argument("--json", default=None, help="Also write the results to this JSON file (parts not run "
                        "keep their earlier entry; with --quick: not under benchmarks/results/).")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="local", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick and args.json is not None and Path(args.json).resolve().is_relative_to(RESULTS_DIR.resolve()):
        parser.error("--quick never writes the committed results file; give another --json or none")
    if args.memory_child:
        memory_child(args.memory_child, args.samples, args.engine, args.workers, args.trace)
        return
    parts = [args.only] if args.only else ["generate", "evaluate", "memory"]
    results: dict = {}
    if args.json and Path(args.json).exists():
        results = json.loads(Path(args.json).read_text())
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if "generate" in parts:
        row = bench_generate(args.images, args.workers, args.shift_set, args.severities)
        results["generate"] = row
        print(f"| task | outputs | workers | local (s) | Ray (s) | local/s | Ray/s | ratio Ray/local | same bytes |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        print(f"| {row['task']} | {row['outputs']} | {row['workers']} | {row['local_s']:.1f} | {row['ray_s']:.1f} | "
              f"{row['local_per_s']:.1f} | {row['ray_per_s']:.1f} | {row['ratio']:.2f} | "
              f"{'yes' if row['bytes_identical'] else 'NO'} |")
        print(f"bytes written per engine: {row['bytes_written'] / 1e6:.1f} MB")
    if "evaluate" in parts:
        from shiftbench.engine.generate import parse_severities

        severities = parse_severities(args.eval_severities) if args.eval_severities else None
        row = bench_evaluate(args.workers, args.quick, severities)
        results["evaluate_quick" if args.quick else "evaluate"] = row
        print("| task | images | workers | local (s) | Ray (s) | local img/s | Ray img/s | ratio local/Ray | same rows |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        print(f"| {row['task']} | {row['images']} | {row['workers']} | {row['local_s']:.1f} | {row['ray_s']:.1f} | "
              f"{row['local_per_s']:.1f} | {row['ray_per_s']:.1f} | {row['ratio']:.2f} | "
              f"{'yes' if row['rows_identical'] and row['predictions_identical'] else 'NO'} |")
    if "memory" in parts:
        sizes = tuple(int(x) for x in args.sizes.split(","))
        row = bench_memory(args.workers, sizes, args.trace)
        results["memory"] = row
        print(row["task"])
        print("| engine | samples | driver peak RSS (MB) | seconds |")
        print("|---|---:|---:|---:|")
        for r in row["runs"]:
            print(f"| {r['engine']} | {r['samples']} | {r['peak_rss_mb']:.1f} | {r['seconds']:.1f} |")
            for line in r.get("top", []):
                print("    " + line)
        print(f"growth {min(sizes)} -> {max(sizes)} samples: Ray driver {row['ray_growth_mb']:+.1f} MB, "
              f"local {row['local_growth_mb']:+.1f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
