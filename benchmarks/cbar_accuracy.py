"""Classifiers under ImageNet-C-bar beside ImageNet-C: top-1 per model from a store, with 95% bootstrap CIs.

    shiftbench evaluate --config configs/cbar_vs_imagenet_c.yaml --store cbar.db
    python benchmarks/cbar_accuracy.py --store cbar.db [--run RUN] [--json benchmarks/results/cbar_accuracy.json]

Per model: clean top-1, the mean over ImageNet-C's 15 corruptions x severities 1-5 and over C-bar's 10 x 1-5
(each the mean of the per-image means over the conditions, with a percentile bootstrap CI over images,
2,000 resamples, seed 0), and C-bar's top-1 per corruption (mean over severities 1-5). The paper's finding
to check (Mintun et al., NeurIPS 2021): C-bar error does not track ImageNet-C error across models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def per_image(samples: list[dict], model: str, shifts: set[str]) -> np.ndarray | None:
    """Each image's mean top-1 over the model's conditions of ``shifts`` (images in one order)."""
    chosen = [s for s in samples if s["model"] == model and s["shift"] in shifts and s["metric"] == "top1"]
    if not chosen:
        return None
    order = sorted(chosen[0]["ids"])
    stacks = []
    for s in chosen:
        by_id = dict(zip(s["ids"], s["values"]))
        stacks.append([float(by_id[i]) for i in order])
    return np.mean(np.asarray(stacks), axis=0)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default=None, help="run id (default: the latest)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from shiftbench.metrics.robustness import IMAGENET_C_CORRUPTIONS
    from shiftbench.metrics.uncertainty import bootstrap_ci
    from shiftbench.results.store import Store
    from shiftbench.shifts.cbar import CBAR_CORRUPTIONS

    with Store(args.store, create=False) as db:
        run = args.run or db.runs()[-1]["run_id"]
        samples = db.samples(run)
    if not samples:
        sys.exit(f"{args.store}: run {run} has no per-sample values")
    models = sorted({s["model"] for s in samples})
    result: dict = {"run": run, "models": {}}
    families = {"clean": {"clean"}, "imagenet_c": set(IMAGENET_C_CORRUPTIONS), "cbar": set(CBAR_CORRUPTIONS)}
    print(f"top-1 (%), 95% CI over images | {' | '.join(families)} | C-bar minus ImageNet-C")
    for model in models:
        entry = {}
        for fam, shifts in families.items():
            values = per_image(samples, model, shifts)
            low, high = bootstrap_ci(values)
            entry[fam] = {"top1": float(values.mean()), "ci": [low, high], "n": int(values.size)}
        gap = per_image(samples, model, families["cbar"]) - per_image(samples, model, families["imagenet_c"])
        entry["cbar_minus_imagenet_c"] = {"diff": float(gap.mean()), "ci": list(bootstrap_ci(gap))}
        entry["cbar_by_corruption"] = {c: float(per_image(samples, model, {c}).mean()) for c in CBAR_CORRUPTIONS}
        result["models"][model] = entry
        cells = [f"{100 * entry[f]['top1']:.1f} [{100 * entry[f]['ci'][0]:.1f}, {100 * entry[f]['ci'][1]:.1f}]"
                 for f in families]
        d = entry["cbar_minus_imagenet_c"]
        print(f"{model} | {' | '.join(cells)} | {100 * d['diff']:+.1f} [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]")
    print("\nC-bar top-1 (%) per corruption, mean over severities 1-5")
    print("corruption | " + " | ".join(models))
    for c in CBAR_CORRUPTIONS:
        print(f"{c} | " + " | ".join(f"{100 * result['models'][m]['cbar_by_corruption'][c]:.1f}" for m in models))
    order_c = sorted(models, key=lambda m: -result["models"][m]["imagenet_c"]["top1"])
    order_bar = sorted(models, key=lambda m: -result["models"][m]["cbar"]["top1"])
    result["ranking"] = {"imagenet_c": order_c, "cbar": order_bar}
    print(f"\nranked by ImageNet-C: {', '.join(order_c)}; by C-bar: {', '.join(order_bar)}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
