"""The runner's throughput with a real timm model against a bare timm forward on the same images (issue 35, item 5).

    python benchmarks/timm_runner.py [--images 256] [--repeats 3] [--json benchmarks/results/timm_runner.json]
    python benchmarks/timm_runner.py --quick   # a smoke run (32 images of 64 px, a tiny network): never writes results

A ResNet-50 built by timm from its real config (``resnet50.a1_in1k``: 224 px, crop 0.95, bicubic), random init
under a fixed seed, saved as timm's hub folder and loaded through ``timm:FOLDER``, as a user with downloaded weights
runs it. The images: ImageNet-sized JPEGs (375x500 and 500x375, quality 90) rendered from the built-in ``objects``
photos into an image folder ``<wnid>/<file>.jpg``. Batch 32, CPU, torch's default threads. Three sides, the same
images, interleaved passes (a busy spell of a shared machine falls on all alike), best of ``--repeats`` after a
warm-up:

- **bare forward**: ``model(x)`` over the batches of tensors made beforehand with timm's own eval transform (only
  the network: what no runner can beat);
- **timm loop**: timm's documented loop, torchvision's ``ImageFolder`` with timm's ``create_transform``, a
  ``DataLoader`` (batch 32, ``num_workers=0``), ``model(x).argmax`` (decode and resize included);
- **shiftbench**: ``sb.evaluate`` of a spec (the folder, ``timm:FOLDER``, ``shifts: [clean]``, ``metrics: [top1]``,
  batch 32) into a new store each pass, the model object created once (``models=``): reading, decoding,
  preprocessing, forward, metrics, the store and the run's identity (the weights' hash) included.

The table gives images per second (wall clock) and per CPU-second of this process (all its threads; a busy,
shared machine disturbs it far less than wall time), and each side as a fraction of the bare forward.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

RESULTS = ROOT / "benchmarks" / "results" / "timm_runner.json"


def image_folder(root: Path, n: int, side: int | None) -> Path:
    """``n`` JPEGs in ``root/<wnid>/``: the ``objects`` photos (cycled) resized to 375x500 or 500x375 (or to
    ``side`` x ``side`` for the quick run), quality 90."""
    from PIL import Image

    import shiftbench as sb
    from shiftbench.models.labels import imagenet_classes

    ds = sb.load_dataset("objects")
    wnids = [c.wnid for c in imagenet_classes()]
    for i in range(n):
        s = ds.load(i % len(ds))
        size = (side, side) if side else ((500, 375) if i % 2 else (375, 500))
        folder = root / wnids[s.label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(s.image).resize(size, Image.Resampling.BICUBIC).save(folder / f"img{i:05d}.jpg", quality=90)
    return root


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads) since ``start``."""
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def bare_forward(model, batches) -> tuple[float, float]:
    import torch

    start = _clock()
    with torch.inference_mode():
        for x in batches:
            model(x)
    return _since(start)


def timm_loop(model, folder: Path, transform, batch: int) -> tuple[float, float]:
    import torch
    import torchvision

    start = _clock()
    data = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False, num_workers=0)
    with torch.inference_mode():
        for x, _ in loader:
            model(x).argmax(dim=1)
    return _since(start)


def shiftbench_run(spec: dict, model_name: str, model, tmp: Path, k: int) -> tuple[float, float]:
    import shiftbench as sb

    start = _clock()
    sb.evaluate(spec, store=tmp / f"run{k}.db", models={model_name: model})
    return _since(start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--arch", default="resnet50.a1_in1k")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="32 small images, timm's test_resnet; writes nothing")
    args = parser.parse_args(argv)
    if args.quick and args.json is not None and args.json.resolve().is_relative_to((ROOT / "benchmarks" / "results").resolve()):
        parser.error("--quick never writes the committed results file; give another --json or none")
    out_json = args.json if (args.json is not None or args.quick) else RESULTS
    if args.quick:
        args.images, args.repeats, args.arch = 32, 1, "test_resnet.r160_in1k"

    import timm
    import timm.data
    import torch

    import shiftbench as sb
    from tiny_hub import save_tiny_timm

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        folder = image_folder(tmp / "photos", args.images, 64 if args.quick else None)
        weights = save_tiny_timm(tmp / "model", seed=0, arch=args.arch)
        name = f"timm:{weights}"
        model = sb.create_model(name)
        reference = timm.create_model(f"local-dir:{weights}", pretrained=True).eval()
        config = timm.data.resolve_data_config({}, model=reference)
        transform = timm.data.create_transform(**config)
        data = torchvision_images(folder, transform)
        batches = [torch.stack(data[i:i + args.batch]) for i in range(0, len(data), args.batch)]
        spec = {"dataset": str(folder), "models": [name], "shifts": ["clean"], "metrics": ["top1"],
                "batch_size": args.batch, "seed": 0}
        times: dict[str, list[tuple[float, float]]] = {"bare forward": [], "timm loop": [], "shiftbench": []}
        bare_forward(reference, batches[:1])  # warm-up
        shiftbench_run(spec, name, model, tmp, -1)
        for k in range(args.repeats):
            times["bare forward"].append(bare_forward(reference, batches))
            times["timm loop"].append(timm_loop(reference, folder, transform, args.batch))
            times["shiftbench"].append(shiftbench_run(spec, name, model, tmp, k))
    best = {side: min(w for w, _ in t) for side, t in times.items()}
    best_cpu = {side: min(c for _, c in t) for side, t in times.items()}
    rate = {side: args.images / t for side, t in best.items()}
    cpu_rate = {side: args.images / t for side, t in best_cpu.items()}
    print(f"{args.arch} (random init, timm {timm.__version__}, torch {torch.__version__}), {args.images} images, "
          f"batch {args.batch}, {torch.get_num_threads()} threads, best of {args.repeats}")
    print("| side | images/s (wall) | of bare forward | images per CPU-second | of bare forward |")
    print("|---|---|---|---|---|")
    for side in times:
        print(f"| {side} | {rate[side]:.2f} | {rate[side] / rate['bare forward']:.1%} | {cpu_rate[side]:.2f} | "
              f"{cpu_rate[side] / cpu_rate['bare forward']:.1%} |")
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps({
            "arch": args.arch, "images": args.images, "batch": args.batch, "repeats": args.repeats,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
            "timm": timm.__version__, "seconds_wall_cpu": times, "images_per_second": rate,
            "images_per_cpu_second": cpu_rate,
            "ratio_to_bare_forward": {s: rate[s] / rate["bare forward"] for s in rate},
            "cpu_ratio_to_bare_forward": {s: cpu_rate[s] / cpu_rate["bare forward"] for s in cpu_rate}},
            indent=2) + "\n")
    return 0


def torchvision_images(folder: Path, transform) -> list:
    """The folder's images through timm's transform, in ImageFolder's order (the bare forward's input)."""
    import torchvision

    data = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return [data[i][0] for i in range(len(data))]


if __name__ == "__main__":
    raise SystemExit(main())
