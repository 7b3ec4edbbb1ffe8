"""Runner throughput against the bare model, and runner memory against dataset size.

    python benchmarks/evaluate.py [--images 1000] [--shift gaussian_noise] [--severity 3] [--json out.json]

1. EfficientNet-Lite0 on N on-the-fly shifted `objects` images through `sb.evaluate` (load, shift,
   predict, metrics, store), against the bare forward pass on the same images pre-made in memory,
   in the same process: (a) model.predict_logits on pre-loaded, pre-shifted uint8 batches (includes
   the model's own resize/normalise), (b) the torch module alone on pre-made normalised tensors.
2. Peak resident memory of the runner on 1,000 and 10,000 images (dummy_classifier, so the model
   does not dominate the time), each in a fresh process: streaming means no growth.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import shiftbench as sb
from shiftbench.datasets.base import Dataset
from shiftbench.registry import DATASETS


class ManyObjects(Dataset):
    """Several seeds of the `objects` dataset back to back (every object on every scene per seed)."""

    name = "_bench_objects"
    annotations = ("label", "mask", "boxes", "caption")
    num_classes = 1000

    def __init__(self, copies: int = 5):
        from shiftbench.datasets.objects import ObjectsDataset

        self.parts = [ObjectsDataset(seed=s, scenes_per_object="all") for s in range(copies)]
        self.class_names = self.parts[0].class_names
        self.per = len(self.parts[0])

    def __len__(self) -> int:
        return self.per * len(self.parts)

    def load(self, index: int):
        sample = self.parts[index // self.per].load(index % self.per)
        return sample.replace(id=f"{index // self.per}/{sample.id}")

    def sample_id(self, index: int) -> str:
        return f"{index // self.per}/{self.parts[index // self.per].sample_id(index % self.per)}"


if "_bench_objects" not in DATASETS:
    DATASETS.add("_bench_objects", ManyObjects, description="benchmark: objects x seeds")


def throughput(n: int, shift: str, severity: int, batch: int) -> dict:
    import torch

    spec = {"dataset": "_bench_objects", "models": ["efficientnet_lite0"], "metrics": ["top1", "ece"],
            "shifts": [{"name": shift, "severities": [severity]}], "limit": n, "batch_size": batch, "seed": 0}
    model = sb.create_model("efficientnet_lite0")
    data = ManyObjects()
    shifter = sb.create_shift(shift)
    images = [shifter(data.load(i), severity=severity, seed=0).image for i in range(n)]
    model.predict_logits(images[:batch])  # warm-up
    t = time.perf_counter()
    for i in range(0, n, batch):
        model.predict_logits(images[i:i + batch])
    bare_predict = n / (time.perf_counter() - t)
    tensors = [torch.as_tensor(model.preprocess(images[i:i + batch])) for i in range(0, n, batch)]
    t = time.perf_counter()
    with torch.inference_mode():
        for x in tensors:
            model.module(x)
    bare_module = n / (time.perf_counter() - t)
    del tensors
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "r.db"
        t = time.perf_counter()
        rows = sb.evaluate(spec, store=store, models={"efficientnet_lite0": model})
        elapsed = time.perf_counter() - t
    # every run records its clean baseline too: n clean + n shifted images went through the model
    runner = 2 * n / elapsed
    top1 = next(r["value"] for r in rows if r["metric"] == "top1" and r["shift"] == shift)
    return {"images": n, "shift": shift, "severity": severity, "batch": batch,
            "bare_predict_img_s": bare_predict, "bare_module_img_s": bare_module, "runner_img_s": runner,
            "runner_vs_bare_predict": runner / bare_predict, "top1_shifted": top1}


def peak_memory(n: int) -> float:
    code = (
        "import sys, resource, tempfile, json; sys.path.insert(0, %r)\n"
        "import evaluate as bench, shiftbench as sb\n"
        "spec = {'dataset': '_bench_objects', 'models': ['dummy_classifier'], 'metrics': ['top1', 'ece'],\n"
        "        'shifts': ['clean'], 'limit': %d, 'batch_size': 64}\n"
        "with tempfile.TemporaryDirectory() as d: sb.evaluate(spec, store=d + '/r.db')\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    ) % (str(Path(__file__).parent), n)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--shift", default="gaussian_noise")
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", default="benchmarks/evaluate.json")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    result = throughput(args.images, args.shift, args.severity, args.batch)
    print(f"EfficientNet-Lite0, {args.images} images, {args.shift} s{args.severity}, batch {args.batch}")
    print(f"{'path':<44}{'images/s':>10}")
    print(f"{'bare module forward (pre-made tensors)':<44}{result['bare_module_img_s']:>10.1f}")
    print(f"{'bare predict_logits (pre-made images)':<44}{result['bare_predict_img_s']:>10.1f}")
    print(f"{'runner (load + shift + predict + store)':<44}{result['runner_img_s']:>10.1f}")
    print(f"runner / bare predict = {100 * result['runner_vs_bare_predict']:.1f}%  (target >= 90%)")
    if not args.skip_memory:
        mem = {n: peak_memory(n) for n in (1000, 10000)}
        result["peak_rss_mib"] = mem
        print(f"peak RSS, dummy_classifier: 1,000 images {mem[1000]:.0f} MiB; 10,000 images {mem[10000]:.0f} MiB")
    result["cpu_count"] = os.cpu_count()
    Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
