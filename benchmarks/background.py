"""Speed of the background shifts on CPU, one core: images/s of the ``compose`` backend at 224 px and
seconds per image of ``adversarial_texture`` (EfficientNet-Lite0, severity 5 = at most 30 iterations).

Samples are rendered first (the ``objects`` dataset at 224 px); assets (scene photos, texture tiles) are
loaded by a warm-up call, then each variant shifts the same samples through the public call
(``shift(list_of_samples)``: parameter draw + apply). OpenCV and torch are held to one thread; rates are
given per CPU-second of this process (what one core delivers, whatever else runs on the machine) and per
wall-clock second.

    python benchmarks/background.py [--n 200] [--adv 8]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="samples per compose variant")
    ap.add_argument("--adv", type=int, default=8, help="images for adversarial_texture (0 to skip)")
    args = ap.parse_args()

    import cv2

    cv2.setNumThreads(1)
    import shiftbench as sb

    ds = sb.load_dataset("objects")
    samples = [ds.load(i % len(ds)) for i in range(args.n)]
    variants = [("background_color", {"color": c}) for c in ("red", "green", "blue", "colorful")]
    variants += [("background_texture", {"texture": t}) for t in (1, 2, 3, 4)]
    variants += [("background_scene", {}), ("object_only", {}), ("background_only", {})]
    print(f"load average {os.getloadavg()[0]:.1f} (other work on this machine slows every figure)")
    print(f"| shift | params | images/s per CPU-second | images/s wall clock |  ({args.n} images, 224 px, 1 thread)")
    print("|---|---|---|---|")
    total_time, total_n = 0.0, 0
    for name, params in variants:
        shift = sb.create_shift(name, **params)
        severity = shift.severities[1]  # a full replacement where severity is graded
        shift(samples[:4], severity=severity, seed=0)  # warm-up: assets, tiles, caches
        t, c = time.perf_counter(), time.process_time()
        shift(samples, severity=severity, seed=0)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        if name != "background_only":
            total_time, total_n = total_time + dc, total_n + len(samples)
        print(f"| {name} | {params or ''} | {len(samples) / dc:.0f} | {len(samples) / dt:.0f} |")
    print(f"compose (colour, texture, scene, object only) overall: {total_n / total_time:.0f} images per CPU-second")

    if args.adv:
        import torch

        torch.set_num_threads(1)
        lite0 = sb.create_model("efficientnet_lite0")
        chosen = []
        for i in range(len(ds)):
            s = ds.load(i)
            if int(lite0.predict_logits([s.image])[0].argmax()) == s.label:
                chosen.append(s)
            if len(chosen) == args.adv:
                break
        shift = sb.create_shift("adversarial_texture")
        shift(chosen[:1], severity=5, seed=1)  # warm-up (model load)
        t, c = time.perf_counter(), time.process_time()
        outs = shift(chosen, severity=5, seed=0)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        iters = [o.meta["attack"]["iterations"] for o in outs]
        print(f"adversarial_texture: {dc / len(chosen):.2f} CPU-s/image, {dt / len(chosen):.2f} s/image wall "
              f"(1 thread, batch of {len(chosen)} clean-correct "
              f"images, {sum(iters) / len(iters):.1f} iterations on average, at most {max(iters)})")


if __name__ == "__main__":
    main()
