"""Speed of the corruptions against the fastest peers: albumentations and kornia, side by side, one thread.

    python benchmarks/peers.py [--sizes 224 512 1024] [--budget 0.6] [--names ...]
                               [--json benchmarks/results/peers.json]

Every corruption that has a peer transform is timed in this one process on the same real photographs
(scikit-image's samples, centre crops resized to each size), with every library held to one thread
(OpenCV, torch, numba, BLAS). shiftbench runs through its public call ``shift(image, severity=s,
seed=k)`` (params drawn per sample, then applied); albumentations through a transform with ``p=1``
on a uint8 HWC image; kornia batched, on a float (N, 3, H, W) tensor of all the photos at once (the
time per image is the batch time / N; the uint8 -> float conversion is not counted, in kornia's
favour). Parameters are matched to ImageNet-C's severity (``PEERS``): equivalent work, not
bit-equal output. A peer that has no such transform is "–".

The floor: one uint8 pass over the image (``cv2.LUT`` with a 256-entry table), the least any
point-wise corruption can cost. ``exponent``: the slope of log(time) against log(pixels) over the
sizes measured, fitted by least squares: 1.0 is linear in the pixel count.

Times: for each (library, corruption, size) single calls are repeated until ``--budget`` seconds
(at least ``--min-calls`` calls) after a warm-up call; median and mean in ms per image.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SIZES = (224, 512, 1024)
SEVERITY = 3  # the peers' parameters below are ImageNet-C's at this severity
POINTWISE = ("brightness", "contrast", "saturate", "pixelate", "jpeg_compression")

# ImageNet-C's parameters at severity 3 (shifts/corruptions), mapped to each peer's own parameters
IMAGENET_C_S3 = {"gaussian_noise": 0.18, "shot_noise": 12, "impulse_noise": 0.09, "speckle_noise": 0.35,
                 "gaussian_blur": 3, "defocus_blur": (6, 0.5), "glass_blur": (1, 2, 3), "motion_blur": (15, 8),
                 "zoom_blur": 0.2, "brightness": 0.3, "contrast": 0.2, "pixelate": 0.4, "jpeg_compression": 15,
                 "saturate": 2.0}


def albumentations_peers() -> dict[str, Callable[[], Any]]:
    """Builders of the albumentations transform equivalent to each corruption at severity 3 (p=1)."""
    import albumentations as A
    import cv2

    p = IMAGENET_C_S3
    return {
        "gaussian_noise": lambda: A.GaussNoise(std_range=(p["gaussian_noise"],) * 2, mean_range=(0, 0),
                                               per_channel=True, p=1),
        "shot_noise": lambda: A.ShotNoise(scale_range=(1 / p["shot_noise"],) * 2, p=1),
        "impulse_noise": lambda: A.SaltAndPepper(amount=(p["impulse_noise"],) * 2, salt_vs_pepper=(0.5, 0.5), p=1),
        "speckle_noise": lambda: A.MultiplicativeNoise(multiplier=(1 - p["speckle_noise"], 1 + p["speckle_noise"]),
                                                       per_channel=True, elementwise=True, p=1),
        "gaussian_blur": lambda: A.GaussianBlur(blur_limit=0, sigma_limit=(p["gaussian_blur"],) * 2, p=1),
        "defocus_blur": lambda: A.Defocus(radius=(p["defocus_blur"][0],) * 2,
                                          alias_blur=(p["defocus_blur"][1],) * 2, p=1),
        "glass_blur": lambda: A.GlassBlur(sigma=p["glass_blur"][0], max_delta=p["glass_blur"][1],
                                          iterations=p["glass_blur"][2], p=1),
        "motion_blur": lambda: A.MotionBlur(blur_limit=(2 * p["motion_blur"][0] + 1,) * 2, p=1),
        "zoom_blur": lambda: A.ZoomBlur(max_factor=(1 + p["zoom_blur"], 1 + p["zoom_blur"] + 0.01),
                                        step_factor=(0.02, 0.02), p=1),
        "snow": lambda: A.RandomSnow(snow_point_range=(0.3, 0.3), brightness_coeff=2.0, method="texture", p=1),
        "fog": lambda: A.RandomFog(fog_coef_range=(0.5, 0.5), alpha_coef=0.1, p=1),
        "brightness": lambda: A.RandomBrightnessContrast(brightness_limit=(p["brightness"],) * 2,
                                                         contrast_limit=(0, 0), p=1),
        "contrast": lambda: A.RandomBrightnessContrast(brightness_limit=(0, 0),
                                                       contrast_limit=(p["contrast"] - 1,) * 2, p=1),
        "elastic_transform": lambda: A.ElasticTransform(alpha=30, sigma=5, p=1),
        "pixelate": lambda: A.Downscale(scale_range=(p["pixelate"],) * 2,
                                        interpolation_pair={"downscale": cv2.INTER_AREA,
                                                            "upscale": cv2.INTER_NEAREST}, p=1),
        "jpeg_compression": lambda: A.ImageCompression(quality_range=(p["jpeg_compression"],) * 2,
                                                       compression_type="jpeg", p=1),
        "spatter": lambda: A.Spatter(mode="mud", p=1),
        "saturate": lambda: A.ColorJitter(brightness=(1, 1), contrast=(1, 1), saturation=(p["saturate"],) * 2,
                                          hue=(0, 0), p=1),
    }


def kornia_peers() -> dict[str, Callable[[], Any]]:
    """Builders of the kornia augmentation equivalent to each corruption at severity 3 (p=1, batched)."""
    import kornia.augmentation as K

    p = IMAGENET_C_S3
    return {
        "gaussian_noise": lambda: K.RandomGaussianNoise(mean=0.0, std=p["gaussian_noise"], p=1),
        "impulse_noise": lambda: K.RandomSaltAndPepperNoise(amount=(p["impulse_noise"],) * 2,
                                                            salt_vs_pepper=(0.5, 0.5), p=1),
        "gaussian_blur": lambda: K.RandomGaussianBlur(kernel_size=(19, 19), sigma=(p["gaussian_blur"],) * 2, p=1),
        "motion_blur": lambda: K.RandomMotionBlur(kernel_size=2 * p["motion_blur"][0] + 1, angle=45.0,
                                                  direction=0.0, p=1),
        "snow": lambda: K.RandomSnow(snow_coefficient=(0.5, 0.5), brightness=(2, 2), p=1),
        "brightness": lambda: K.RandomBrightness(brightness=(1 + p["brightness"],) * 2, p=1),
        "contrast": lambda: K.RandomContrast(contrast=(p["contrast"],) * 2, p=1),
        "elastic_transform": lambda: K.RandomElasticTransform(kernel_size=(31, 31), sigma=(5.0, 5.0),
                                                              alpha=(1.0, 1.0), p=1),
        "jpeg_compression": lambda: K.RandomJPEG(jpeg_quality=(p["jpeg_compression"],) * 2, p=1),
        "saturate": lambda: K.RandomSaturation(saturation=(p["saturate"],) * 2, p=1),
    }


def photos(size: int) -> list[np.ndarray]:
    """Six real photographs (scikit-image's samples), centre-cropped and resized to size x size RGB."""
    import cv2
    from skimage import data

    out = []
    for load in (data.astronaut, data.chelsea, data.coffee, data.rocket, data.cat, data.retina):
        im = load()[..., :3]
        h, w = im.shape[:2]
        side = min(h, w)
        im = im[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]
        interp = cv2.INTER_AREA if side >= size else cv2.INTER_CUBIC
        out.append(np.ascontiguousarray(cv2.resize(im, (size, size), interpolation=interp)))
    return out


def timed(call: Callable[[int], Any], budget: float, min_calls: int) -> dict[str, float]:
    """Median and mean ms of single calls ``call(k)`` after one warm-up call, until ``budget`` seconds."""
    call(0)
    times: list[float] = []
    spent = 0.0
    k = 1
    while len(times) < min_calls or spent < budget:
        start = time.perf_counter()
        call(k)
        dt = time.perf_counter() - start
        times.append(dt)
        spent += dt
        k += 1
    return {"median_ms": statistics.median(times) * 1e3, "mean_ms": statistics.fmean(times) * 1e3, "calls": len(times)}


def exponent(sizes: list[int], ms: list[float]) -> float | None:
    """Least-squares slope of log(time) over log(pixel count): 1.0 = linear in the pixels."""
    if len(sizes) < 2 or any(m is None or m <= 0 for m in ms):
        return None
    x = np.log(np.asarray(sizes, np.float64) ** 2)
    y = np.log(np.asarray(ms, np.float64))
    return float(np.polyfit(x, y, 1)[0])


def run(sizes: list[int], severity: int, names: list[str], budget: float, min_calls: int,
        libraries: tuple[str, ...] = ("albumentations", "kornia")) -> dict[str, Any]:
    import cv2

    cv2.setNumThreads(1)
    from shiftbench.registry import SHIFTS

    peers: dict[str, dict[str, Callable[[], Any]]] = {}
    versions: dict[str, str] = {}
    torch = None
    if "albumentations" in libraries:
        import albumentations

        peers["albumentations"] = albumentations_peers()
        versions["albumentations"] = albumentations.__version__
    if "kornia" in libraries:
        import kornia
        import torch

        torch.set_num_threads(1)
        peers["kornia"] = kornia_peers()
        versions["kornia"] = kornia.__version__
        versions["torch"] = torch.__version__
    rows: list[dict[str, Any]] = []
    identity = np.arange(256, dtype=np.uint8)
    floors = {}
    for size in sizes:
        images = photos(size)
        floors[size] = timed(lambda k: cv2.LUT(images[k % len(images)], identity), budget, min_calls)["median_ms"]
        batch = None
        if torch is not None:
            batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div(255.0).contiguous()
        for name in names:
            shift = SHIFTS.create(name)
            row: dict[str, Any] = {"name": name, "size": size, "floor_ms": floors[size],
                                   "shiftbench": timed(lambda k: shift(images[k % len(images)], severity=severity, seed=k),
                                                       budget, min_calls)}
            for lib, builders in peers.items():
                if name not in builders:
                    row[lib] = None
                    continue
                try:
                    transform = builders[name]()
                    if lib == "kornia":
                        torch.manual_seed(0)
                        res = timed(lambda k: transform(batch), budget, min_calls)
                        res = {"median_ms": res["median_ms"] / len(images), "mean_ms": res["mean_ms"] / len(images),
                               "calls": res["calls"], "batch": len(images)}
                    else:
                        res = timed(lambda k: transform(image=images[k % len(images)])["image"], budget, min_calls)
                except Exception as exc:  # a peer API that changed: reported, not fatal
                    res = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                row[lib] = res
            fastest = [row[lib]["median_ms"] for lib in peers if row.get(lib) and "median_ms" in row[lib]]
            row["fastest_peer_ms"] = min(fastest) if fastest else None
            row["ratio_to_fastest_peer"] = (row["shiftbench"]["median_ms"] / row["fastest_peer_ms"]
                                            if row["fastest_peer_ms"] else None)
            row["ratio_to_floor"] = row["shiftbench"]["median_ms"] / floors[size]
            rows.append(row)
            print(_line(row, list(peers)), flush=True)
    fits = {}
    for name in names:
        mine = [r for r in rows if r["name"] == name]
        fits[name] = exponent([r["size"] for r in mine], [r["shiftbench"]["median_ms"] for r in mine])
    return {"sizes": list(sizes), "severity": severity, "budget_s": budget, "min_calls": min_calls,
            "statistic": "ms per image: median and mean of single calls; kornia: batch of 6 / 6",
            "versions": versions, "floor_ms": {str(k): v for k, v in floors.items()}, "rows": rows,
            "exponent": fits, "pointwise": list(POINTWISE), "machine": _machine()}


def _line(row: dict[str, Any], libs: list[str]) -> str:
    cells = [f"{row['name']:18s}", f"{row['size']:5d}", f"{row['shiftbench']['median_ms']:9.3f}"]
    for lib in libs:
        r = row.get(lib)
        cells.append(f"{r['median_ms']:9.3f}" if r and "median_ms" in r else f"{'err' if r else '–':>9s}")
    ratio = row["ratio_to_fastest_peer"]
    cells.append(f"{ratio:6.2f}x" if ratio else "      –")
    cells.append(f"floor x{row['ratio_to_floor']:.1f}")
    return " ".join(cells)


def _machine() -> dict[str, Any]:
    import cv2

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__, "opencv": cv2.__version__, "threads": 1}


def markdown(result: dict[str, Any]) -> str:
    libs = [lib for lib in ("albumentations", "kornia") if lib in result["versions"]]
    head = ["corruption", "px", "shiftbench ms (median / mean)"] + [f"{lib} ms" for lib in libs] + [
        "ours / fastest peer", "ours / floor"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [r["name"], str(r["size"]), f"{r['shiftbench']['median_ms']:.3f} / {r['shiftbench']['mean_ms']:.3f}"]
        for lib in libs:
            v = r.get(lib)
            cells.append("–" if not v else ("error" if "error" in v else f"{v['median_ms']:.3f}"))
        ratio = r["ratio_to_fastest_peer"]
        cells.append("–" if ratio is None else f"{ratio:.2f}")
        cells.append(f"{r['ratio_to_floor']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| size | floor: one uint8 LUT pass (ms) |", "|---|---|"]
    lines += [f"| {k} | {v:.4f} |" for k, v in result["floor_ms"].items()]
    lines += ["", "| corruption | exponent (time ~ pixels^e) |", "|---|---|"]
    lines += [f"| {k} | {'–' if v is None else f'{v:.2f}'} |" for k, v in result["exponent"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from shiftbench.shifts.corruptions import CORRUPTION_GROUPS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--names", nargs="*", default=None, help="corruptions (default: every one with a peer)")
    ap.add_argument("--budget", type=float, default=0.6, help="seconds per (library, corruption, size)")
    ap.add_argument("--min-calls", type=int, default=5)
    ap.add_argument("--libraries", nargs="*", default=["albumentations", "kornia"])
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "peers.json")
    args = ap.parse_args(argv)
    have = set()
    if "albumentations" in args.libraries:
        have |= set(albumentations_peers())
    if "kornia" in args.libraries:
        have |= set(kornia_peers())
    names = args.names or [n for n in CORRUPTION_GROUPS["all"] if n in have]
    result = run(args.sizes, SEVERITY, names, args.budget, args.min_calls, tuple(args.libraries))
    print(markdown(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
