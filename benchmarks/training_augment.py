"""Cost per image of shifts as training-time augmentation (shiftbench.training), on CPU.

    python benchmarks/training_augment.py [--n 94] [--size 224] [--json benchmarks/results/training_augment.json]

Samples are the built-in ``objects`` dataset (one congruent scene per object, ``--size`` px, real masks).
Three tables:

1. policies: ``policy.sample(sample, epoch, index)`` over the n samples (choice, param draw, apply), in
   ms per image: CPU time of this process (what one core spends; OpenCV and torch held to one thread)
   and wall clock; ``p=0`` is the policy's own overhead. Every shift of a policy is warmed up first, at each
   of its severities (scene photos, texture tiles, numba's cached kernels load once per process).
2. shifts: the same per shift (severities 1..5 in turn), so a policy's cost can be predicted from its mix.
3. DataLoader: images/s of a ShiftDataset (render + shift + tensors) with 0 and 2 workers, batch 16, over
   one epoch after a warm one (persistent workers, so the figure is the steady rate, not process start-up).

Other work on the machine slows the wall-clock figures; the CPU-time ones are steadier.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

CORRUPTIONS = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "defocus_blur", "glass_blur",
               "motion_blur", "zoom_blur", "gaussian_blur", "snow", "frost", "fog", "spatter", "brightness",
               "contrast", "saturate", "elastic_transform", "pixelate", "jpeg_compression"]
BACKGROUNDS = [("background_color", {"color": c}) for c in ("red", "green", "blue", "colorful")] + \
              [("background_texture", {"texture": t}) for t in (1, 2, 3, 4)] + \
              [("background_scene", {}), ("object_only", {})]
ATTRIBUTES = [("attribute_color", {}), ("attribute_pattern", {}), ("attribute_material", {}), ("attribute_style", {})]


def policies():
    import shiftbench as sb
    from shiftbench.training import ShiftPolicy

    chain = sb.create_shift("chain", shifts=[{"name": "background_scene", "params": {}}, "jpeg_compression"])
    return [
        ("nothing (p=0)", ShiftPolicy(["gaussian_noise"], p=0.0)),
        ("19 corruptions, s1-5", ShiftPolicy(CORRUPTIONS)),
        ("10 backgrounds, s1-5", ShiftPolicy(BACKGROUNDS)),
        ("4 attributes (classic), s1-5", ShiftPolicy(ATTRIBUTES)),
        ("chain: background_scene -> jpeg_compression", ShiftPolicy([chain])),
        ("all 33 above, p=0.5", ShiftPolicy(CORRUPTIONS + BACKGROUNDS + ATTRIBUTES + [chain], p=0.5)),
    ]


def time_policy(policy, samples, epoch: int = 0) -> tuple[float, float]:
    """(CPU ms, wall ms) per image of policy.sample over the samples."""
    for entry in policy.entries:  # warm-up: scene photos, texture tiles, numba's cached kernels
        for severity in entry.severities:
            entry.shift(samples[0], severity=severity, seed=1)
    t, c = time.perf_counter(), time.process_time()
    for i, s in enumerate(samples):
        policy.sample(s, epoch, i)
    return (time.process_time() - c) / len(samples) * 1e3, (time.perf_counter() - t) / len(samples) * 1e3


def time_loader(dataset, workers: int, batch: int = 16) -> float:
    import torch

    from shiftbench.training import collate

    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers, collate_fn=collate,
                                         persistent_workers=workers > 0)
    dataset.set_epoch(0)
    for _ in loader:  # warm epoch
        pass
    dataset.set_epoch(1)
    t = time.perf_counter()
    n = sum(len(b["index"]) for b in loader)
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=94, help="samples (objects, one scene each)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    import shiftbench as sb
    from shiftbench.training import ShiftDataset, ShiftPolicy

    ds = sb.load_dataset("objects", size=args.size, scenes_per_object=1)
    n = min(args.n, len(ds))
    samples = [ds.load(i) for i in range(n)]  # the first pass also reads the cut-outs and scene photos
    t = time.perf_counter()
    for i in range(n):
        ds.load(i)
    load_ms = (time.perf_counter() - t) / n * 1e3
    results: dict = {"n": n, "size": args.size, "load_ms": load_ms, "policies": {}, "shifts": {}, "loader": {},
                     "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                                 "load_average": os.getloadavg()[0]}}
    print(f"{n} objects samples at {args.size} px; rendering one costs {load_ms:.1f} ms (assets cached); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    print(f"\n| policy (p=1 unless said) | CPU ms / image | wall ms / image |")
    print("|---|---|---|")
    chosen = None
    for name, policy in policies():
        cpu, wall = time_policy(policy, samples)
        results["policies"][name] = {"cpu_ms": cpu, "wall_ms": wall, "policy": repr(policy)}
        print(f"| {name} | {cpu:.2f} | {wall:.2f} |")
        chosen = policy

    print(f"\n| shift (severities 1-5 in turn) | CPU ms / image | wall ms / image |")
    print("|---|---|---|")
    for entry in CORRUPTIONS + BACKGROUNDS + ATTRIBUTES:
        name, params = (entry, {}) if isinstance(entry, str) else entry
        label = name + (f"({', '.join(f'{k}={v}' for k, v in params.items())})" if params else "")
        cpu, wall = time_policy(ShiftPolicy([(name, params)]), samples)
        results["shifts"][label] = {"cpu_ms": cpu, "wall_ms": wall}
        print(f"| {label} | {cpu:.2f} | {wall:.2f} |")

    print(f"\n| ShiftDataset over objects ({n} samples), last policy above, batch 16 | images / s |")
    print("|---|---|")
    if n != len(ds):  # a list of pre-rendered samples: no render cost in the loader
        print("(pre-rendered samples: --n below the dataset size)")
    for output in ("tensors", "uint8"):
        dataset = ShiftDataset(ds if n == len(ds) else samples, chosen, task="classification", output=output)
        for workers in (0, 2):
            rate = time_loader(dataset, workers)
            results["loader"][f"output={output}, workers={workers}"] = rate
            print(f"| output={output}, num_workers={workers} | {rate:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
