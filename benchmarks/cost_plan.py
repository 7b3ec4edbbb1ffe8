"""Per-image costs behind the worked cost plans of docs/scale.md, measured on this machine's CPU.

    python benchmarks/cost_plan.py [--json benchmarks/results/cost_plan.json]
    python benchmarks/cost_plan.py --quick [--json OUT]   # a smoke run: never writes benchmarks/results/

What it measures (no downloads: every model is random-init from its config, timing needs no weights):

- the 15 ImageNet-C corruptions through the registry (``sb.create_shift(name)``) on real ``objects``
  photos resized to 224 px, per image, averaged over severities 1-5, and the PNG encode time and size of
  each output (PIL, compress_level 6: what ``shiftbench generate`` writes);
- a ViT-B/16 forward (``transformers.ViTConfig()`` defaults) at 224 px, batch 32, float32, per image;
- one denoising pass of a UNet with Stable Diffusion 2 inpainting's config (9 input channels, 64x64
  latent = 512 px, batch 1); classifier-free guidance needs two passes per step. If one pass would
  take over 60 s the pass is measured at a 32x32 latent and scaled by pixel count (said in the table);
- the SD2-sized VAE decode of one 64x64 latent to 512 px (skipped with --quick);
- the CPU side of background inpainting at 512 px: mask dilation (6 px, elliptical) plus compositing the
  object back over the new background (a real 512 px photograph from scikit-image standing in for
  the generated one), and the PNG encode time and size of that output.

--quick: fewer images and repeats, ViT batch 8, UNet at a 32x32 latent, no VAE (a smoke run, minutes); its
``--json`` may not name a file under ``benchmarks/results/`` (the committed results are never overwritten).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from io import BytesIO
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))

COMMON = ["gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
          "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
          "jpeg_compression"]


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_time(call: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``repeats`` single calls (the machine is shared: the median ignores stalls)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def photos(n: int, size: int) -> list[np.ndarray]:
    """``n`` real ``objects`` photos resized to ``size`` px (square), with their object masks."""
    import cv2

    import shiftbench as sb

    objects = sb.load_dataset("objects")
    out = []
    for i in range(n):
        s = objects.load((i * 37) % len(objects))  # spread over classes, not the first few
        out.append(cv2.resize(s.image, (size, size), interpolation=cv2.INTER_CUBIC))
    return out


def png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def bench_corruptions(n_images: int, repeats: int) -> dict:
    import shiftbench as sb

    images = photos(n_images, 224)
    rows = []
    for name in COMMON:
        shift = sb.create_shift(name)
        shift(images[0], severity=3, seed=0)  # warm-up: numba kernels, noise tables
        per_sev = []
        outputs = []
        for sev in range(1, 6):
            times = []
            for r in range(repeats):
                for k, im in enumerate(images):
                    start = time.perf_counter()
                    out = shift(im, severity=sev, seed=r * len(images) + k)
                    times.append(time.perf_counter() - start)
                    if r == 0:
                        outputs.append(out)
            per_sev.append(statistics.median(times))
        enc_times, sizes = [], []
        for out in outputs:
            start = time.perf_counter()
            data = png(out)
            enc_times.append(time.perf_counter() - start)
            sizes.append(len(data))
        rows.append({"name": name, "shift_ms": 1e3 * statistics.mean(per_sev),
                     "shift_ms_by_severity": [1e3 * t for t in per_sev],
                     "png_ms": 1e3 * statistics.median(enc_times), "png_kb": statistics.mean(sizes) / 1e3})
        print(f"  {name:18s} shift {rows[-1]['shift_ms']:7.2f} ms  png {rows[-1]['png_ms']:6.2f} ms "
              f"{rows[-1]['png_kb']:6.1f} kB", flush=True)
    clean_kb = statistics.mean(len(png(im)) for im in images) / 1e3
    return {"images": n_images, "repeats": repeats, "size": 224, "rows": rows,
            "sum_shift_ms": sum(r["shift_ms"] for r in rows),
            "mean_png_ms": statistics.mean(r["png_ms"] for r in rows),
            "mean_png_kb": statistics.mean(r["png_kb"] for r in rows), "clean_png_kb": clean_kb}


def bench_vit(batch: int, repeats: int) -> dict:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(num_labels=1000)).eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.inference_mode():
        model(pixel_values=x)  # warm-up
        t = median_time(lambda: model(pixel_values=x), repeats)
    params = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    return {"batch": batch, "repeats": repeats, "threads": torch.get_num_threads(), "params_m": params / 1e6,
            "s_per_batch": t, "ms_per_image": 1e3 * t / batch, "images_per_s": batch / t}


def sd2_unet() -> Any:
    from diffusers import UNet2DConditionModel

    # Stable Diffusion 2 (inpainting) UNet config values; in_channels 9 = 4 latent + 4 masked-image latent + mask
    return UNet2DConditionModel(
        sample_size=64, in_channels=9, out_channels=4, layers_per_block=2,
        block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=1024,
        attention_head_dim=(5, 10, 20, 20), use_linear_projection=True,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    ).eval()


def bench_unet(latent: int, repeats: int) -> dict:
    import torch

    torch.manual_seed(0)
    start = time.perf_counter()
    unet = sd2_unet()
    build_s = time.perf_counter() - start
    x = torch.randn(1, 9, latent, latent)
    text = torch.randn(1, 77, 1024)  # OpenCLIP ViT-H text states, 77 tokens
    step = torch.tensor([500])
    with torch.inference_mode():
        start = time.perf_counter()
        unet(x, step, encoder_hidden_states=text)  # first pass (warm-up), also the >60 s check
        first_s = time.perf_counter() - start
        t = median_time(lambda: unet(x, step, encoder_hidden_states=text), repeats) if repeats else first_s
    params = sum(p.numel() for p in unet.parameters())
    del unet
    gc.collect()
    scale = (64 / latent) ** 2
    return {"latent": latent, "repeats": repeats, "params_m": params / 1e6, "build_s": build_s,
            "first_pass_s": first_s, "s_per_pass": t, "scale_to_512": scale, "s_per_pass_512": t * scale,
            "peak_rss_mib": peak_rss_mib()}


def bench_vae(repeats: int) -> dict:
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    # Stable Diffusion 2's VAE config values
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, sample_size=768,
        block_out_channels=(128, 256, 512, 512),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
    ).eval()
    z = torch.randn(1, 4, 64, 64)
    with torch.inference_mode():
        start = time.perf_counter()
        vae.decode(z)
        first_s = time.perf_counter() - start
        t = median_time(lambda: vae.decode(z), repeats) if repeats else first_s
    del vae
    gc.collect()
    return {"size": 512, "repeats": repeats, "first_s": first_s, "s_per_decode": t, "peak_rss_mib": peak_rss_mib()}


def bench_composite(n_images: int, repeats: int) -> dict:
    """The CPU side of one inpainted output at 512 px: dilate the object mask, feather-blend the object
    back over the generated background (the same calls background_inpaint makes), encode PNG."""
    import cv2

    import shiftbench as sb
    from shiftbench.conditioning.masks import DEFAULT_DILATION, dilate
    from shiftbench.shifts.background.base import blend_background

    from skimage import data

    objects = sb.load_dataset("objects")
    backgrounds = []
    for load in (data.astronaut, data.coffee, data.rocket, data.chelsea):
        im = load()[..., :3]
        h, w = im.shape[:2]
        side = min(h, w)
        im = im[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]
        backgrounds.append(np.ascontiguousarray(cv2.resize(im, (512, 512), interpolation=cv2.INTER_CUBIC)))
    dil_t, blend_t, png_t, sizes = [], [], [], []
    for i in range(n_images):
        s = objects.load((i * 37) % len(objects))
        image = cv2.resize(s.image, (512, 512), interpolation=cv2.INTER_CUBIC)
        mask = cv2.resize(s.mask.astype(np.uint8), (512, 512), interpolation=cv2.INTER_NEAREST).astype(bool)
        # a stand-in for the generated background: a real photograph at 512 px, so the PNG size is a photo's
        background = backgrounds[i % len(backgrounds)]
        dil_t.append(median_time(lambda: dilate(mask, DEFAULT_DILATION), repeats))
        blend_t.append(median_time(lambda: blend_background(image, background, mask, 1.0, DEFAULT_DILATION), repeats))
        out = blend_background(image, background, mask, 1.0, DEFAULT_DILATION)
        png_t.append(median_time(lambda: png(out), max(1, repeats // 2)))
        sizes.append(len(png(out)))
    return {"images": n_images, "repeats": repeats, "size": 512, "dilation_px": DEFAULT_DILATION,
            "dilate_ms": 1e3 * statistics.median(dil_t), "blend_ms": 1e3 * statistics.median(blend_t),
            "png_ms": 1e3 * statistics.median(png_t), "png_kb": statistics.mean(sizes) / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: fewer repeats, smaller batches")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON (with --quick: not under benchmarks/results/)")
    args = ap.parse_args()
    if args.quick and args.json is not None and args.json.resolve().is_relative_to(RESULTS_DIR.resolve()):
        ap.error("--quick never writes the committed results file; give another --json or none")
    q = args.quick
    out: dict[str, Any] = {"quick": q, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                   "python": platform.python_version(),
                                                   "loadavg_start": os.getloadavg()}}
    print("corruptions at 224 px (severities 1-5):", flush=True)
    out["corruptions"] = bench_corruptions(2 if q else 6, 1 if q else 3)
    print("compositing at 512 px:", flush=True)
    out["composite"] = bench_composite(3 if q else 8, 3 if q else 10)
    print("ViT-B/16 forward:", flush=True)
    out["vit"] = bench_vit(8 if q else 32, 2 if q else 5)
    print("SD2-sized inpainting UNet pass:", flush=True)
    unet = bench_unet(32 if q else 64, 1 if q else 3)
    if not q and unet["first_pass_s"] > 60:
        unet = bench_unet(32, 3)  # too slow at full size here: measure at 32x32 and scale by pixel count
    out["unet"] = unet
    if not q:
        print("SD2-sized VAE decode:", flush=True)
        out["vae"] = bench_vae(2)
    out["machine"]["loadavg_end"] = os.getloadavg()

    c, v, u, m = out["corruptions"], out["vit"], out["unet"], out["composite"]
    lines = [
        ("15 corruptions, sum of per-image costs (224 px, mean over sev 1-5)", f"{c['sum_shift_ms']:.2f} ms"),
        ("  mean per corruption", f"{c['sum_shift_ms'] / 15:.2f} ms"),
        ("PNG encode per 224 px output (mean)", f"{c['mean_png_ms']:.2f} ms"),
        ("PNG size per 224 px corrupted output (mean)", f"{c['mean_png_kb']:.1f} kB"),
        ("PNG size per 224 px clean image", f"{c['clean_png_kb']:.1f} kB"),
        (f"ViT-B/16 forward, batch {v['batch']}, fp32, {v['threads']} threads", f"{v['ms_per_image']:.1f} ms/image "
                                                                             f"({v['images_per_s']:.1f} img/s)"),
        (f"SD2 inpainting UNet pass, batch 1, latent {u['latent']}x{u['latent']}", f"{u['s_per_pass']:.2f} s"),
        ("  scaled to 64x64 latent (512 px)" if u["latent"] != 64 else "  at 512 px (measured)",
         f"{u['s_per_pass_512']:.2f} s"),
        ("  one DDIM step with CFG (2 passes), 512 px", f"{2 * u['s_per_pass_512']:.2f} s"),
        ("  peak RSS of this process so far", f"{u['peak_rss_mib']:.0f} MiB"),
    ]
    if "vae" in out:
        lines.append(("SD2 VAE decode, 64x64 latent -> 512 px", f"{out['vae']['s_per_decode']:.2f} s"))
    lines += [
        (f"mask dilation ({m['dilation_px']} px) at 512 px", f"{m['dilate_ms']:.2f} ms"),
        ("feathered compositing at 512 px", f"{m['blend_ms']:.2f} ms"),
        ("PNG encode / size at 512 px (composited photo)", f"{m['png_ms']:.1f} ms / {m['png_kb']:.0f} kB"),
    ]
    width = max(len(a) for a, _ in lines)
    print(f"\n| {'measured on this CPU':{width}s} | value |\n|{'-' * (width + 2)}|---:|")
    for a, b in lines:
        print(f"| {a:{width}s} | {b} |")
    print(f"\nload average start {out['machine']['loadavg_start']}, end {out['machine']['loadavg_end']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
