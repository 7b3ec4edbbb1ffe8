"""Benchmark: the report's confidence intervals and paired tests (report.stats.Uncertainty) on the demo's size.

3 models x 88 conditions (clean, 15 corruptions x 5 severities, 12 single-severity shifts) x 64 samples x
2 metrics (top1, ece:15), 1,000 resamples: the seconds to index the samples, and to annotate the main
tables (rows averaged over severities, joint resampling) and the per-severity tables. Prints one table.

    python benchmarks/report_stats.py [--models 3] [--samples 64] [--boot 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shiftbench.metrics.uncertainty import sample_statistic
from shiftbench.report.stats import Uncertainty
from shiftbench.report.tables import build_tables

CORRUPTIONS = ("gaussian_noise shot_noise impulse_noise defocus_blur glass_blur motion_blur zoom_blur snow frost "
               "fog brightness contrast elastic_transform pixelate jpeg_compression").split()
SINGLE = [("background_color", {"color": c}) for c in ("red", "green", "blue", "black", "white")] + \
         [("background_texture", {"texture": t}) for t in ("wood", "grass")] + \
         [("object_only", {}), ("background_only", {}), ("adversarial_texture", {}),
          ("attribute_color", {}), ("attribute_style", {})]


def demo_like(models: int, n: int) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(0)
    conditions = [("clean", {}, 0)] + [(c, {}, s) for c in CORRUPTIONS for s in range(1, 6)] + \
                 [(name, params, 1) for name, params in SINGLE]
    assert len(conditions) == 88
    ids = [f"img{i:03d}" for i in range(n)]
    samples, rows = [], []
    for m in range(models):
        for shift, params, severity in conditions:
            confidence = rng.uniform(0.1, 1.0, n)
            correct = (rng.random(n) < 0.9 - 0.1 * severity - 0.05 * m).astype(float)
            for metric, kind, values in (("top1", "mean", correct), ("ece", "ece:15", np.stack([confidence, correct], 1))):
                samples.append({"model": f"model{m}", "dataset": "objects", "shift": shift, "params": params,
                                "severity": severity, "metric": metric, "kind": kind, "ids": ids, "values": values})
                rows.append({"model": f"model{m}", "dataset": "objects", "shift": shift, "params": params,
                             "severity": severity, "metric": metric, "value": sample_statistic(kind, values), "n": n})
    return samples, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    samples, rows = demo_like(args.models, args.samples)
    timings: dict[str, list[float]] = {"index samples": [], "main tables": [], "per-severity tables": [], "total": []}
    cpu: list[float] = []
    cells = {}
    for _ in range(args.repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        u = Uncertainty(samples, n_boot=args.boot)
        t1 = time.perf_counter()
        main_tables = build_tables(rows)
        for table in main_tables:
            u.annotate(table)
        t2 = time.perf_counter()
        detail = build_tables(rows, per_severity=True)
        for table in detail:
            u.annotate(table)
        t3 = time.perf_counter()
        cpu.append(time.process_time() - c0)
        for key, value in (("index samples", t1 - t0), ("main tables", t2 - t1), ("per-severity tables", t3 - t2),
                           ("total", t3 - t0)):
            timings[key].append(value)
        cells = {"main tables": sum(len(t.cells) for t in main_tables),
                 "per-severity tables": sum(len(t.cells) for t in detail)}
    print(f"{args.models} models x 88 conditions x {args.samples} samples x 2 metrics, {args.boot} resamples, "
          f"best of {args.repeat}")
    print(f"| step | cells | seconds |\n|---|---:|---:|")
    for key, values in timings.items():
        count = cells.get(key, sum(cells.values()) if key == "total" else "")
        print(f"| {key} | {count} | {min(values):.3f} |")
    print(f"| total, CPU time of this process | | {min(cpu):.3f} |")


if __name__ == "__main__":
    main()
