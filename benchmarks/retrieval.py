"""Speed of batched retrieval: 1,000 queries x 10,000 gallery images, 512-d, top-50 and target ranks.

Run: PYTHONPATH=src python benchmarks/retrieval.py [--repeats 5]
Prints wall-clock seconds per call (median and best of the repeats); the machine's load is printed too,
since a shared CPU makes single numbers noisy.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from shiftbench.tasks.retrieval import retrieve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--gallery", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    q = rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    g = rng.normal(size=(args.gallery, args.dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    targets = rng.integers(0, args.gallery, args.queries)
    exclude = (targets + 1) % args.gallery
    times = {"top-50 only": [], "top-50 + ranks": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        retrieve(q, g, None, exclude, k=50)
        times["top-50 only"].append(time.perf_counter() - t)
        t = time.perf_counter()
        retrieve(q, g, targets, exclude, k=50)
        times["top-50 + ranks"].append(time.perf_counter() - t)
    print(f"{args.queries} queries x {args.gallery} gallery x {args.dim}-d, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        print(f"  {name}: median {np.median(values):.3f} s, best {min(values):.3f} s")


if __name__ == "__main__":
    main()
