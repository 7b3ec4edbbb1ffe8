"""Mean IoU of each mask provider against the exact masks of the ``objects`` dataset.

One image per object (``scenes_per_object=1``, 94 images, 224 px). Providers: u2netp on the whole
image, u2netp inside the sample's box, GrabCut from the box (5 iterations). SAM needs weights that are
not available offline (give ``--sam`` a hub id or local folder to add it).

    python benchmarks/mask_iou.py [--limit 94] [--sam facebook/sam-vit-base]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=94)
    ap.add_argument("--sam", default=None)
    args = ap.parse_args()

    import shiftbench as sb
    from shiftbench.conditioning.masks import create_mask_provider, dilate, mask_iou

    ds = sb.load_dataset("objects", scenes_per_object=1)
    samples = [ds.load(i) for i in range(min(args.limit, len(ds)))]
    providers = {"u2netp": create_mask_provider("u2netp"), "u2netp (box)": create_mask_provider("u2netp", box=True),
                 "grabcut (box)": create_mask_provider("grabcut")}
    if args.sam:
        providers["sam (box)"] = create_mask_provider("sam", model=args.sam)
    print("| provider | mean IoU | median IoU | IoU >= 0.75 | covered by the 6 px dilation | mean quality | s/image |")
    print("|---|---|---|---|---|---|---|")
    for name, provider in providers.items():
        ious, covered, quality = [], [], []
        t = time.perf_counter()
        for s in samples:
            r = provider(s)
            ious.append(mask_iou(r.mask, s.mask))
            # share of the exact object inside the provider's dilated mask (what a background shift keeps)
            covered.append(float((dilate(r.mask, 6) & s.mask).sum() / s.mask.sum()))
            quality.append(r.quality)
        dt = (time.perf_counter() - t) / len(samples)
        ious = np.array(ious)
        print(f"| {name} | {ious.mean():.3f} | {np.median(ious):.3f} | {100 * (ious >= 0.75).mean():.0f}% | "
              f"{100 * np.mean(covered):.1f}% | {np.mean(quality):.3f} | {dt:.3f} |")
    print(f"({len(samples)} images)")


if __name__ == "__main__":
    main()
