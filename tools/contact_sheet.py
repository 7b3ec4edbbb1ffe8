"""Write a contact sheet of `objects` samples: each cell is the image and its mask side by side.

    python tools/contact_sheet.py --out docs/img/objects_contact_sheet.png [--n 24] [--seed 0] [--cols 4]
    python tools/contact_sheet.py --every-object --out docs/img/objects_natural_context.png   # all 94, images only

``--every-object`` shows each object's first natural-context placement (its first congruent scene), 10 per
row at half size with the object id and scene id under each image: the sheet the context tags are checked on.
``--context random`` shows the former pairing (an object on any scene) for comparison.

``--shift NAME [--params JSON] [--severity 5]`` shows the samples under a background shift instead, each
cell the composite as the shift makes it now (no band around the exact mask) beside the composite with the
6 px feathered band that estimated masks get (what every mask got before issue 27), to check by eye that no
ring of the old scene is left around the objects:

    python tools/contact_sheet.py --shift background_color --params '{"color": "red"}' \
        --out docs/img/objects_background_red.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

import shiftbench as sb


def contact_sheet(dataset, indices: list[int], cols: int) -> Image.Image:
    h, w = dataset.canvas
    pad, text_h = 6, 14
    cell_w, cell_h = 2 * w + 3 * pad, h + text_h + 2 * pad
    rows = (len(indices) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * cell_w, rows * cell_h), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for n, index in enumerate(indices):
        sample = dataset.load(index)
        x, y = (n % cols) * cell_w, (n // cols) * cell_h
        sheet.paste(Image.fromarray(sample.image), (x + pad, y + pad + text_h))
        sheet.paste(Image.fromarray((sample.mask.astype(np.uint8) * 255)), (x + 2 * pad + w, y + pad + text_h))
        x0, y0, x1, y1 = sample.boxes[0]
        draw.rectangle([x + pad + x0, y + pad + text_h + y0, x + pad + x1 - 1, y + pad + text_h + y1 - 1],
                       outline=(255, 0, 0))
        draw.text((x + pad, y + 2), f"{sample.caption} [{sample.label} {sample.class_name}]"[:64], fill=(0, 0, 0))
    return sheet


def shifted_sheet(dataset, indices: list[int], cols: int, shift, severity: int, seed: int) -> Image.Image:
    """Each cell: the shifted sample now (exact mask, no band) | the same with the 6 px band of estimated masks."""
    h, w = dataset.canvas
    pad, text_h = 6, 14
    cell_w, cell_h = 2 * w + 3 * pad, h + text_h + 2 * pad
    rows = (len(indices) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * cell_w, rows * cell_h), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for n, index in enumerate(indices):
        sample = dataset.load(index)
        banded = sample.replace(meta={**sample.meta, "mask_exact": False})  # treated as an estimated mask
        x, y = (n % cols) * cell_w, (n // cols) * cell_h
        now, before = (shift(s, severity=severity, seed=seed).image for s in (sample, banded))
        sheet.paste(Image.fromarray(now), (x + pad, y + pad + text_h))
        sheet.paste(Image.fromarray(before), (x + 2 * pad + w, y + pad + text_h))
        draw.text((x + pad, y + 2), f"now: no band | before: 6 px band  [{sample.class_name}]"[:64], fill=(0, 0, 0))
    return sheet


def every_object_sheet(dataset, cols: int = 10, scale: float = 0.5) -> Image.Image:
    """One image per object (its first sample), thumbnails with ``object @ scene`` under each."""
    h, w = dataset.canvas
    tw, th = round(w * scale), round(h * scale)
    pad, text_h = 4, 22
    firsts: dict[str, int] = {}
    for i in range(len(dataset)):
        firsts.setdefault(dataset.pair(i)[0], i)
    rows = (len(firsts) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * (tw + pad), rows * (th + text_h + pad)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for n, (object_id, index) in enumerate(firsts.items()):
        sample = dataset.load(index)
        x, y = (n % cols) * (tw + pad), (n // cols) * (th + text_h + pad)
        sheet.paste(Image.fromarray(sample.image).resize((tw, th), Image.Resampling.LANCZOS), (x, y))
        draw.text((x, y + th + 1), object_id[:18], fill=(0, 0, 0))
        draw.text((x, y + th + 11), dataset.pair(index)[1][:18], fill=(90, 90, 90))
    return sheet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img/objects_contact_sheet.png"))
    parser.add_argument("--n", type=int, default=24)
    parser.add_argument("--cols", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", choices=("natural", "random"), default="natural")
    parser.add_argument("--every-object", action="store_true", help="every object once, images only")
    parser.add_argument("--shift", default=None, help="a background shift: composites now | with the 6 px band")
    parser.add_argument("--params", default="{}", help="the shift's params as JSON")
    parser.add_argument("--severity", type=int, default=5)
    args = parser.parse_args()
    dataset = sb.load_dataset("objects", seed=args.seed, context=args.context)
    if args.every_object:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        every_object_sheet(dataset).save(args.out, optimize=True)
        print(f"wrote {args.out} ({len(dataset.object_list)} objects, {args.context} context)")
        return
    # spread the picks over the whole set so different objects and scenes show
    indices = np.linspace(0, len(dataset) - 1, args.n).round().astype(int).tolist()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.shift:
        shift = sb.create_shift(args.shift, **json.loads(args.params))
        shifted_sheet(dataset, indices, args.cols, shift, args.severity, args.seed).save(args.out, optimize=True)
        print(f"wrote {args.out} ({len(indices)} samples of {len(dataset)} under {args.shift} {args.params} "
              f"s{args.severity}: now | with the 6 px band)")
        return
    contact_sheet(dataset, indices, args.cols).save(args.out, optimize=True)
    print(f"wrote {args.out} ({len(indices)} samples of {len(dataset)})")


if __name__ == "__main__":
    main()
