"""How much of the old background a background shift leaves around the object, per mask provider, measured
against the exact masks of the ``objects`` dataset.

One image per object (``scenes_per_object=1``, 94 images, 224 px), severity 5 (the new background at weight
1: whatever of the old one is left comes from the mask and its band alone). The composite is the shifts' own
(``blend_background`` with the band ``BackgroundShift.band`` picks: none for the sample's exact mask, 6 px
for an estimated one); each image is composited once over a black and once over a white background, so the
weight of the old background at each pixel is read from the two outputs, not from a formula. Per provider:

- **old background outside the object**: pixels outside the exact object that still show any of the old
  background (weight > 0), as a share of the image's background, and in object areas (ring pixels per
  object pixel: 0.30 = a ring 30 % the size of the object);
- **old-background weight**: the same pixels weighted by how much of the old background each shows, as a
  share of the background (a pixel at half weight counts half);
- **object not kept exactly**: pixels of the exact object that the composite changed (the provider missed
  them and the new background covers them, fully or in the band), and the same weighted by how much of the
  new background covers each (the band covers a missed rim only partly).

Rows: the exact mask as the shifts use it now (no band), the exact mask with the 6 px band (what every mask
got before issue 27), and each estimated provider with its 6 px band (what the shifts do) and without
(``dilation=0``: the trade-off the band makes). SAM needs weights from a hub (``--sam ID_OR_FOLDER``).

    python benchmarks/background_leak.py [--limit 94] [--sam facebook/sam-vit-base] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def leak(sample, mask: np.ndarray, band: int) -> dict[str, float]:
    """Old-background share of one composite with ``mask`` and ``band`` against the sample's exact mask."""
    from shiftbench.shifts.background.base import blend_background

    truth = sample.mask
    black = blend_background(sample.image, np.zeros_like(sample.image), mask, 1.0, band).astype(np.int32)
    white = blend_background(sample.image, np.full_like(sample.image, 255), mask, 1.0, band).astype(np.int32)
    new_weight = (white - black).min(axis=-1) / 255.0  # 1 where only the new background shows
    old = np.clip(1.0 - new_weight, 0.0, 1.0)
    outside = ~truth
    shows = (old > 0) & outside
    changed = ((black != sample.image) | (white != sample.image)).any(axis=-1) & truth
    return {"pixels": float(shows.sum() / outside.sum()), "per_object": float(shows.sum() / truth.sum()),
            "weight": float(old[outside].sum() / outside.sum()), "object_changed": float(changed.sum() / truth.sum()),
            "object_lost": float(np.clip(new_weight, 0.0, 1.0)[truth].sum() / truth.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=94)
    ap.add_argument("--sam", default=None, help="SAM weights (hub id or local folder) to add its rows")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import shiftbench as sb
    from shiftbench.conditioning.masks import DEFAULT_DILATION
    from shiftbench.errors import ShiftbenchError

    ds = sb.load_dataset("objects", scenes_per_object=1)
    samples = [ds.load(i) for i in range(min(args.limit, len(ds)))]
    providers = {"u2netp": ("u2netp", {}), "u2netp (box)": ("u2netp", {"box": True}), "grabcut (box)": ("grabcut", {})}
    if args.sam:
        providers["sam (box)"] = ("sam", {"model": args.sam})
    shift = sb.create_shift("background_color", color="red")  # mask="auto": the sample's own (exact) mask
    rows: list[tuple[str, list[dict[str, float]], float]] = []
    rows.append((f"exact mask, no band (now: band {shift.band(samples[0])} px)",
                 [leak(s, s.mask, shift.band(s)) for s in samples], 0.0))
    rows.append((f"exact mask, {DEFAULT_DILATION} px band (before issue 27)",
                 [leak(s, s.mask, DEFAULT_DILATION) for s in samples], 0.0))
    for name, (provider, options) in providers.items():
        estimated = sb.create_shift("background_color", color="red", mask=provider, mask_options=options)
        t = time.perf_counter()
        masks, refused = [], 0
        for s in samples:  # the provider's mask, post-processed and checked as the shifts use it
            try:
                masks.append((s, estimated.object_mask(s)))
            except ShiftbenchError:  # an empty or full mask: the shift refuses the image (left out here)
                refused += 1
        dt = (time.perf_counter() - t) / len(samples)
        note = f"; {refused} image(s) refused: empty mask" if refused else ""
        rows.append((f"{name}, {estimated.band(samples[0])} px band (the shifts' default{note})",
                     [leak(s, m, estimated.band(s)) for s, m in masks], dt))
        rows.append((f"{name}, no band (dilation=0)", [leak(s, m, 0) for s, m in masks], dt))
    print(f"{len(samples)} images of objects (one per object, 224 px), severity 5; means over images\n")
    print("| mask | old background outside the object: % of background pixels | ring pixels per object pixel "
          "| old-background weight, % of background | object pixels changed, % | object covered (weight), % |")
    print("|---|---|---|---|---|---|")
    out = []
    for label, values, dt in rows:
        mean = {k: float(np.mean([v[k] for v in values])) for k in values[0]}
        worst = float(np.max([v["per_object"] for v in values]))
        print(f"| {label} | {100 * mean['pixels']:.2f} | {mean['per_object']:.3f} (worst {worst:.3f}) | "
              f"{100 * mean['weight']:.2f} | {100 * mean['object_changed']:.2f} | {100 * mean['object_lost']:.2f} |")
        out.append({"mask": label, **mean, "per_object_worst": worst, "seconds_per_image": dt})
    if not args.sam:
        print("\nsam: not measured (its weights come from a hub; --sam ID_OR_FOLDER adds its rows)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"images": len(samples), "rows": out}, f, indent=2)


if __name__ == "__main__":
    main()
