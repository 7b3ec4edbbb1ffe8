"""How far each adapter's model input is from its own library's eval transform, before and after issue 35.

    python benchmarks/preprocess_fidelity.py [--images 200] [--json benchmarks/results/preprocess_fidelity.json]
    python benchmarks/preprocess_fidelity.py --quick     # 20 images; never writes the results file

For every adapter, the same generated images (sizes 1 to 1,000 px a side, aspect up to 24, portrait and
landscape, RGB / grey / RGBA / palette / grey + alpha, random pixels from a fixed seed) go through shiftbench's
:class:`~shiftbench.models.base.Preprocess` (the image read as shiftbench reads a file: ``to_rgb_uint8``) and
through the library's own transform (the PIL image, ``convert("RGB")``): the largest absolute difference of the
normalised float tensors, and the mean over images of each image's mean absolute difference.

"before" is the transform the adapter declared until issue 35: the same parameters through the recipe every
model used then (the crop box in the original image, then one OpenCV resize, bicubic / bilinear switched to area
averaging past a 2x reduction), which is the ``"tf"`` recipe today. "after" is the adapter's ``Preprocess`` now.
Two sets of images: generated noise (the hardest case for resampling) and natural photos. The bundled
EfficientNet-Lite models keep their recipe (``"tf"``, their numbers unchanged: before = after); they are compared
with timm's eval transform for the same TensorFlow weights (``tf_efficientnet_lite0.in1k``'s config with the
packaged normalisation, mean 127 / std 128 on 0..255), which is the closest published PyTorch recipe.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results" / "preprocess_fidelity.json"
MODES = ("RGB", "L", "RGBA", "P", "LA")


def images(n: int, seed: int = 0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        h, w = (int(v) for v in rng.integers(1, 1001, 2))
        if max(h, w) / min(h, w) > 24:
            continue
        mode = MODES[len(out) % len(MODES)]
        channels = {"RGB": 3, "L": 0, "RGBA": 4, "P": 0, "LA": 2}[mode]
        arr = rng.integers(0, 256, (h, w, channels) if channels else (h, w), dtype=np.uint8)
        image = Image.fromarray(arr, "L" if mode == "P" else mode)
        if mode == "P":
            image = image.convert("P")
            image.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
        out.append(image)
    return out


def photos(n: int, seed: int = 0):
    """The built-in ``objects`` photos (real scenes behind real cut-outs), each resized bicubically to a random
    ImageNet-like size (shorter side 200..500, aspect 3:4 to 4:3): natural images, where resampling differs less."""
    from PIL import Image

    import shiftbench as sb

    ds = sb.load_dataset("objects")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        short, ratio = int(rng.integers(200, 501)), float(rng.uniform(1.0, 4 / 3))
        size = (short, int(short * ratio)) if i % 2 else (int(short * ratio), short)
        out.append(Image.fromarray(ds.load(i % len(ds)).image).resize(size, Image.Resampling.BICUBIC))
    return out


def cases():
    """(adapter, what, our Preprocess after, our Preprocess before or None, the library's transform)."""
    import open_clip
    import timm.data
    import torchvision.models as tvm
    from timm.models import get_pretrained_cfg

    from shiftbench.models.base import Preprocess
    from shiftbench.models.open_clip_models import OPENAI_MEAN, OPENAI_STD, preprocess_from_open_clip
    from shiftbench.models.timm_models import preprocess_from_data_config
    from shiftbench.models.torchvision_models import preprocess_from_weights

    def before(p: Preprocess) -> Preprocess:
        return dataclasses.replace(p, recipe="tf", resize_size=None)

    for name in ("resnet50.a1_in1k", "resnet50.tv_in1k", "vit_base_patch16_clip_224.openai_ft_in1k",
                 "dm_nfnet_f0.dm_in1k"):
        config = timm.data.resolve_data_config(pretrained_cfg=get_pretrained_cfg(name).to_dict())
        after = preprocess_from_data_config(config)
        yield ("timm", name, after, before(after), timm.data.create_transform(**config))
    cfg = {"size": 224, "mean": OPENAI_MEAN, "std": OPENAI_STD, "interpolation": "bicubic", "resize_mode": "shortest"}
    after = preprocess_from_open_clip(cfg)
    yield ("open_clip", "ViT-B-32 (shortest, bicubic)", after, before(after),
           open_clip.image_transform(224, is_train=False, mean=OPENAI_MEAN, std=OPENAI_STD))
    for weights in (tvm.ResNet50_Weights.IMAGENET1K_V1, tvm.ResNet50_Weights.IMAGENET1K_V2):
        yield ("torchvision", f"resnet50 {weights.name}", preprocess_from_weights(weights), None, weights.transforms())
    import torch
    from torchvision import transforms as T

    for variant, size in ((0, 224), (1, 240), (2, 260)):
        from shiftbench.models.efficientnet import CROP_PADDING

        ours = Preprocess(size=(size, size), mean=(127.0,) * 3, std=(128.0,) * 3, crop_fraction=size / (size + CROP_PADDING),
                          interpolation="bicubic", value_range=255.0, recipe="tf")
        config = timm.data.resolve_data_config(pretrained_cfg=get_pretrained_cfg(f"tf_efficientnet_lite{variant}.in1k").to_dict())
        config.update(mean=(127.0 / 255,) * 3, std=(128.0 / 255,) * 3)
        yield ("bundled", f"efficientnet_lite{variant} vs timm's tf_efficientnet_lite{variant}", ours, ours,
               timm.data.create_transform(**config))
    del torch, T


def measure(preprocess, transform, pictures) -> tuple[float, float]:
    from shiftbench.sample import to_rgb_uint8

    worst, means = 0.0, []
    for image in pictures:
        ours = preprocess([to_rgb_uint8(image)])[0]
        theirs = transform(image.convert("RGB")).numpy()
        diff = np.abs(ours - theirs)
        worst, _ = max(worst, float(diff.max())), means.append(float(diff.mean()))
    return worst, float(np.mean(means))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick and args.json is not None and args.json.resolve().is_relative_to((ROOT / "benchmarks" / "results").resolve()):
        parser.error("--quick never writes the committed results file; give another --json or none")
    out_json = args.json if (args.json is not None or args.quick) else RESULTS
    n = 20 if args.quick else args.images
    rows = []
    for kind, pictures in (("noise", images(n)), ("photos", photos(n))):
        what = ("generated images (1..1000 px a side, aspect <= 24, modes " + ", ".join(MODES) + ")"
                if kind == "noise" else "objects photos at ImageNet-like sizes")
        print(f"\n{n} {what}")
        print("| adapter | library transform | before: max abs (mean) | after: max abs (mean) |")
        print("|---|---|---|---|")
        for adapter, what, after, before, transform in cases():
            a = measure(after, transform, pictures)
            b = measure(before, transform, pictures) if before is not None else None
            rows.append({"images": kind, "adapter": adapter, "what": what, "after": a, "before": b})
            shown_b = f"{b[0]:.4g} ({b[1]:.3g})" if b else "(new adapter)"
            print(f"| {adapter} | {what} | {shown_b} | {a[0]:.4g} ({a[1]:.3g}) |")
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps({"images": n, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
