"""Classifier top-1 under Pascal-EA's attribute edits, from a store: per-model and mean change per attribute,
family means, and the paper's order checked against ours (computed, not written).

Reads a run of ``configs/objects_attributes.yaml`` (or any run with ``top1`` rows for attribute_* shifts);
runs no model. Changes are shifted - clean in points (negative is worse), at the run's highest attribute
severity. With ``--subset`` a second table repeats the numbers on the samples every model gets right on
clean (computed from the stored per-sample values; a post-hoc view, not the protocol's curation).

    python benchmarks/attributes_classifiers.py --store attr.db [--run RUN_ID] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

import numpy as np

from shiftbench.conditioning.attribute_text import ATTRIBUTES
from shiftbench.report.pascal_ea import ATTRIBUTE_COLUMNS, attribute_value, table1

# Pascal-EA Table 1: mIoU change averaged over 11 semantic segmenters (shared/REFERENCE.md section 2)
PAPER = {"violet": -9.7, "pink": -8.3, "multi-color": -12.0, "wood": -19.7, "stone": -19.5, "metal": -18.7,
         "paper": -31.2, "dotted": -9.0, "striped": -8.0, "snowy": -8.1, "painting": -7.3, "sketch": -56.5}
# "material and sketch hurt most": the five largest drops of the paper are exactly these
PAPER_WORST = ("wood", "stone", "metal", "paper", "sketch")


def family_means(changes: dict[str, float | None]) -> dict[str, float]:
    """Mean change per attribute family over the values that were measured."""
    out = {}
    for family, values in ATTRIBUTES.items():
        vals = [changes[v] for v in values if changes.get(v) is not None]
        if vals:
            out[family] = float(np.mean(vals))
    return out


def _ranks(x: Sequence[float]) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in set(x):  # average ranks for ties
        idx = [i for i, xi in enumerate(x) if xi == v]
        ranks[idx] = ranks[idx].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson of the ranks, ties averaged); NaN when either side is constant."""
    ra, rb = _ranks(list(a)), _ranks(list(b))
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")  # undefined, said as such rather than warned about
    return float(np.corrcoef(ra, rb)[0, 1])


def verdict(changes: dict[str, float | None]) -> dict[str, Any]:
    """Where the paper's order holds on ``changes`` (attribute value -> change in points)."""
    measured = [v for _, v in ATTRIBUTE_COLUMNS if changes.get(v) is not None]
    ordered = sorted(measured, key=lambda v: changes[v])  # most negative first
    worst = ordered[:len(PAPER_WORST)]
    fam = family_means(changes)
    paper_fam = family_means(PAPER)  # type: ignore[arg-type]
    return {
        "worst": worst,
        "worst_is_material_and_sketch": set(worst) == set(PAPER_WORST),
        "rank": {v: ordered.index(v) + 1 for v in measured},
        "family_order": sorted(fam, key=fam.get),
        "paper_family_order": sorted(paper_fam, key=paper_fam.get),
        "spearman_vs_paper": spearman([changes[v] for v in measured], [PAPER[v] for v in measured]),
    }


def subset_changes(samples: list[dict[str, Any]], metric: str = "top1") -> tuple[dict[str, dict[str, float]], int]:
    """Changes per model and attribute on the samples every model classifies correctly on clean."""
    per = [s for s in samples if s["metric"] == metric]
    clean = {s["model"]: dict(zip(s["ids"], np.asarray(s["values"], dtype=float))) for s in per if s["shift"] == "clean"}
    keep = set.intersection(*({i for i, v in d.items() if v == 1.0} for d in clean.values())) if clean else set()
    out: dict[str, dict[str, float]] = {m: {} for m in clean}
    for s in per:
        value = attribute_value(s["shift"], s["params"])
        if value is None or s["model"] not in clean:
            continue
        vals = [float(v) for i, v in zip(s["ids"], s["values"]) if i in keep]
        if vals:
            out[s["model"]][value] = 100.0 * (float(np.mean(vals)) - 1.0)
    return out, len(keep)


def markdown(per_model: dict[str, dict[str, float | None]], clean: dict[str, float | None]) -> str:
    values = [v for _, v in ATTRIBUTE_COLUMNS]
    head = ["model", "clean top-1"] + values + ["color", "material", "pattern", "style", "mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    models = list(per_model)
    mean_row = {v: float(np.mean([per_model[m][v] for m in models])) for v in values
                if all(per_model[m].get(v) is not None for m in models)}
    rows = [(m, per_model[m], clean[m]) for m in models]
    rows.append(("**mean**", mean_row, float(np.mean([clean[m] for m in models]))))
    for name, ch, c in rows:
        fam = family_means(ch)
        cells = [f"{ch[v]:+.1f}" if ch.get(v) is not None else "–" for v in values]
        fcells = [f"{fam[f]:+.1f}" if f in fam else "–" for f in ATTRIBUTES]
        overall = [ch[v] for v in values if ch.get(v) is not None]
        lines.append("| " + " | ".join([name, f"{c:.1f}" if c is not None else "–"] + cells + fcells
                                       + [f"{np.mean(overall):+.1f}"]) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default=None, help="run id (default: the latest)")
    ap.add_argument("--subset", action="store_true", help="also on the samples every model gets right on clean")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from shiftbench.results.store import Store

    db = Store(args.store, create=False)
    try:
        run = db.run(args.run)
        rows = db.rows(run["run_id"])
        samples = db.samples(run["run_id"]) if args.subset else []
    finally:
        db.close()
    t = table1(rows, metric="top1")
    per_model = {m: t["cells"][m] for m in t["models"]}
    mean = {v: float(np.mean([per_model[m][v] for m in t["models"]])) for v in t["columns"]}
    result: dict[str, Any] = {"severity": t["severity"], "n": t["clean_n"], "clean": t["clean"], "changes": per_model,
                              "mean": mean, "family_means": {m: family_means(c) for m, c in per_model.items()},
                              "verdict": {m: verdict(c) for m, c in {**per_model, "mean": mean}.items()}}
    print(f"top-1 change against clean (points), severity {t['severity']}, n = {sorted(set(t['clean_n'].values()))}")
    print(markdown(per_model, t["clean"]))
    for m, v in result["verdict"].items():
        print(f"{m}: worst five {v['worst']}; material+sketch worst: {v['worst_is_material_and_sketch']}; "
              f"family order {v['family_order']} (paper {v['paper_family_order']}); "
              f"Spearman vs paper {v['spearman_vs_paper']:+.2f}")
    if args.subset:
        sub, n = subset_changes(samples)
        clean100 = {m: 100.0 for m in sub}
        submean = {v: float(np.mean([sub[m][v] for m in sub])) for v in mean if all(v in sub[m] for m in sub)}
        result["subset"] = {"n": n, "changes": sub, "verdict": verdict(submean)}
        print(f"\nsamples every model gets right on clean: n = {n}")
        print(markdown(sub, clean100))  # type: ignore[arg-type]
        v = result["subset"]["verdict"]
        print(f"mean: worst five {v['worst']}; material+sketch worst: {v['worst_is_material_and_sketch']}; "
              f"family order {v['family_order']}; Spearman vs paper {v['spearman_vs_paper']:+.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1, sort_keys=True)
    return result


if __name__ == "__main__":
    main()
