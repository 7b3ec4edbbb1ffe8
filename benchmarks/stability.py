"""ImageNet-P stability per model from one store: the tables of docs/stability.md.

    shiftbench evaluate --config configs/imagenet_p.yaml --store stability.db
    python benchmarks/stability.py --store stability.db [--run RUN] [--json benchmarks/results/stability.json]

Per model: mFR and mT5D (the mean over the run's ImageNet-P perturbations at difficulty 1 of 100 x the model's
flip probability or top-5 distance / AlexNet's published one; "over k of 10" when the run has only some of the
ten) with their 95% bootstrap intervals over sequences (report.stats.Uncertainty, seeded by the run's seed, the
sequences resampled jointly across perturbations), clean top-1 for reference, and per perturbation the raw
flip probability FP (%) and top-5 distance with their intervals, computed exactly as the report computes them
(report/stability.py). Also checks every stored flip probability against the reference formula on the
per-sample values (the mean over sequences of each sequence's flip share) and prints the largest difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _stat(s) -> dict | None:
    return None if s is None else {"value": s.value, "low": s.low, "high": s.high, "n": s.n}


def table(store: str, run_id: str | None = None) -> dict:
    """The run's stability table: ``{"run", "dataset", "models": [...]}``."""
    from shiftbench.report.stability import stability
    from shiftbench.report.stats import Uncertainty
    from shiftbench.results.records import load

    run, = load(store, run_id, ("results", "samples"))
    if not any(r.metric in ("flip_prob", "t5d") for r in run.rows):
        sys.exit(f"{store}: run {run.run_id} has no flip_prob / t5d rows (evaluate configs/imagenet_p.yaml into it)")
    unc = Uncertainty(run.samples, seed=run.seed) if run.samples else None
    out: dict = {"run": run.run_id, "dataset": run.rows[0].dataset, "models": []}
    largest = 0.0
    for s in run.samples or []:  # the stored row is the mean of the per-sequence values, as the reference averages
        if s.metric not in ("flip_prob", "t5d"):
            continue
        row = next(r for r in run.rows if r.key == s.key and r.metric == s.metric)
        largest = max(largest, abs(float(s.values.astype("float64").mean()) - row.value))
    out["largest_row_vs_per_sequence_mean"] = largest
    for e in stability(run.rows, unc):
        clean = next((r for r in run.rows if r.model == e.model and r.shift == "clean" and r.metric == "top1"), None)
        out["models"].append({
            "model": e.model, "clean_top1": clean.value if clean else None, "mfr": _stat(e.mfr), "mt5d": _stat(e.mt5d),
            "covered": e.covered,
            "perturbations": [{"shift": p.shift, "difficulty": p.difficulty, "params": p.params, "fp": _stat(p.fp),
                               "fr": _stat(p.fr), "t5d": _stat(p.t5d), "t5d_norm": _stat(p.t5d_norm)}
                              for p in e.perturbations]})
    return out


def _fmt(cell: dict | None, scale: float = 1.0, digits: int = 1) -> str:
    if not cell or cell.get("value") is None:
        return "–"
    text = f"{scale * cell['value']:.{digits}f}"
    if cell.get("low") is not None and cell.get("high") is not None:
        text += f" [{scale * cell['low']:.{digits}f}, {scale * cell['high']:.{digits}f}]"
    return text


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default=None, help="run id (default: the latest)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = table(args.store, args.run)
    print(f"{result['dataset']}, run {result['run']}; 95% bootstrap CI over sequences\n")
    print("| model | clean top-1 (%) | mFR | mT5D | perturbations | sequences |")
    print("|---|---|---|---|---|---|")
    for m in result["models"]:
        n = min((p["fp"]["n"] or 0 for p in m["perturbations"]), default=0)
        over = "all 10" if len(m["covered"]) == 10 else f"{len(m['covered'])} of 10"
        top1 = "–" if m["clean_top1"] is None else f"{100 * m['clean_top1']:.1f}"
        print(f"| {m['model']} | {top1} | {_fmt(m['mfr'])} | {_fmt(m['mt5d'])} | {over} | {n} |")
    shifts = list(dict.fromkeys(p["shift"] for m in result["models"] for p in m["perturbations"]))
    print("\nFlip probability FP (%) [95% CI] per perturbation (difficulty 1)\n")
    print("| model | " + " | ".join(s.removeprefix("p_") for s in shifts) + " |")
    print("|---" * (len(shifts) + 1) + "|")
    for m in result["models"]:
        per = {p["shift"]: p for p in m["perturbations"] if p["difficulty"] == 1 and not p["params"]}
        print(f"| {m['model']} | " + " | ".join(_fmt(per[s]["fp"], 100.0) if s in per else "–" for s in shifts) + " |")
    print("\nTop-5 distance T5D [95% CI] per perturbation (difficulty 1)\n")
    print("| model | " + " | ".join(s.removeprefix("p_") for s in shifts) + " |")
    print("|---" * (len(shifts) + 1) + "|")
    for m in result["models"]:
        per = {p["shift"]: p for p in m["perturbations"] if p["difficulty"] == 1 and not p["params"]}
        print(f"| {m['model']} | " + " | ".join(_fmt(per[s]["t5d"], 1.0, 2) if s in per else "–" for s in shifts) + " |")
    print(f"\nlargest |row - mean of its per-sequence values|: {result['largest_row_vs_per_sequence_mean']:.3g}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
