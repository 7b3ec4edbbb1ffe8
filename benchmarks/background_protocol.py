"""Clean top-1 of the bundled classifiers on the built-in ``objects`` dataset before and after the protocol
changes of issue 16: the former pairing (each object on any scene, ``context="random"``) against natural
context (each object on scenes of its own context), and how many samples survive ObjectCompose's curation
(every classifier right on clean) as the number of placements per object grows.

    python benchmarks/background_protocol.py [--placements 1 4 6] [--json out.json]

Prints a Markdown table; one forward pass per model and sample, CPU, seed 0.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

MODELS = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")


def hits(dataset, models, batch: int = 32) -> dict[str, np.ndarray]:
    out = {m: [] for m in models}
    for start in range(0, len(dataset), batch):
        samples = [dataset.load(i) for i in range(start, min(start + batch, len(dataset)))]
        labels = np.array([s.label for s in samples])
        for name, model in models.items():
            out[name].append(np.asarray(model.predict_logits([s.image for s in samples])).argmax(axis=1) == labels)
    return {m: np.concatenate(v) for m, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--placements", type=int, nargs="+", default=[1, 4, 6])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import shiftbench as sb

    models = {m: sb.create_model(m) for m in MODELS}
    rows = []
    print("| context | placements per object | samples | " + " | ".join(f"{m[-5:]} clean top-1" for m in MODELS)
          + " | mean | all three right (curated n) |")
    print("|---|---|---|" + "---|" * len(MODELS) + "---|---|")
    for context in ("random", "natural"):
        for k in args.placements:
            t = time.perf_counter()
            data = sb.load_dataset("objects", scenes_per_object=k, context=context)
            h = hits(data, models)
            top1 = {m: float(v.mean()) for m, v in h.items()}
            survive = int(np.logical_and.reduce(list(h.values())).sum())
            rows.append({"context": context, "placements": k, "samples": len(data), "top1": top1,
                         "mean": float(np.mean(list(top1.values()))), "curated": survive,
                         "seconds": time.perf_counter() - t})
            print(f"| {context} | {k} | {len(data)} | " + " | ".join(f"{100 * top1[m]:.1f}" for m in MODELS)
                  + f" | {100 * rows[-1]['mean']:.1f} | {survive} |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
