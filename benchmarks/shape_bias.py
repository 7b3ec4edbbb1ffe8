"""Shape bias per model, with the single-cue controls, from one store: the table of docs/shape_bias.md.

    shiftbench evaluate --config configs/shape_bias.yaml --store shape.db
    python benchmarks/shape_bias.py --store shape.db [--run RUN] [--json benchmarks/results/shape_bias.json]

Per model (clean condition of the run): shape bias = shape / (shape + texture decisions) on the cue-conflict
images, the share of those images decided by either cue, the accuracy of the texture alone (texture class) and
of the silhouette alone (shape class), all decisions among the set's classes (metrics/shape_bias.py), each with
its 95% bootstrap CI over images computed as the report computes it (report.stats.Uncertainty, seeded by the
run's seed, 1,000 resamples), its n (images), and chance = 1 / the set's classes. Last column: shape bias
over the cue-conflict images whose silhouette alone and whose texture patch alone the same model gets right
(both cues known to carry their class for that model; bootstrap over those images, 2,000 resamples, seed 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

KEYS = ("shape_bias", "cue_decided", "texture_alone_acc", "silhouette_alone_acc")
HEADS = ("shape bias", "cue decided", "texture alone", "silhouette alone")


def table(store: str, run_id: str | None = None) -> dict:
    """The run's shape-bias table: ``{"run", "dataset", "chance", "classes", "models": [...]}``."""
    from shiftbench.report.stats import Uncertainty
    from shiftbench.results.store import Store

    with Store(store, create=False) as db:
        run = db.run(run_id)
        rows = [r for r in db.rows(run["run_id"]) if r["shift"] == "clean"]
        samples = db.samples(run["run_id"])
    if not any(r["metric"] == "shape_bias" for r in rows):
        sys.exit(f"{store}: run {run['run_id']} has no shape_bias rows (evaluate configs/shape_bias.yaml into it)")
    unc = Uncertainty(samples, seed=int(run.get("seed") or 0)) if samples else None
    models = [m for m in dict.fromkeys(r["model"] for r in rows)]
    chance = next((r["value"] for r in rows if r["metric"] == "cue_chance"), None)
    extra = next((r.get("extra") or {} for r in rows if r["metric"] == "shape_bias"), {})
    out: dict = {"run": run["run_id"], "dataset": rows[0]["dataset"], "chance": chance,
                 "classes": extra.get("classes"), "models": []}
    for model in models:
        entry: dict = {"model": model}
        for key in KEYS:
            row = next((r for r in rows if r["model"] == model and r["metric"] == key), None)
            if row is None:
                continue
            agg = unc.aggregate(model, key, [("clean", {}, 0)], against_clean=False) if unc and unc.has(model, key) else None
            entry[key] = {"value": row["value"], "low": agg and agg["low"], "high": agg and agg["high"],
                          "n": agg["n"] if agg else None}
        entry["both_cues"] = both_cues(samples, model)
        counts = next((r.get("extra") or {} for r in rows if r["model"] == model and r["metric"] == "shape_bias"), {})
        entry["decisions"] = {k: counts.get(k) for k in ("shape_decisions", "texture_decisions", "conflict_images",
                                                         "texture_images", "silhouette_images")}
        out["models"].append(entry)
    return out


def both_cues(samples: list[dict], model: str) -> dict | None:
    """Shape bias over the cue-conflict images whose two cues the model gets right alone (its silhouette alone
    and that very texture patch alone): where each cue, on its own, is known to carry its class. Percentile
    bootstrap over those images, 2,000 resamples, seed 0 (``metrics.shape_bias.shape_bias_interval``)."""
    from shiftbench.metrics.shape_bias import shape_bias_interval

    def get(metric: str) -> dict | None:
        return next((s for s in samples if s["model"] == model and s["metric"] == metric and s["shift"] == "clean"), None)

    conflicts, textures, silhouettes = get("shape_bias"), get("texture_alone_acc"), get("silhouette_alone_acc")
    if not (conflicts and textures and silhouettes):
        return None
    texture_right = dict(zip(textures["ids"], textures["values"]))
    silhouette_right = dict(zip(silhouettes["ids"], silhouettes["values"]))
    shape, texture = [], []
    for sid, (is_shape, decided) in zip(conflicts["ids"], conflicts["values"]):
        _, pair, seed = sid.split("/")  # conflict/<shape>+<texture>#<crop>/s<seed>
        shape_object, texture_patch = pair.split("+")
        if (silhouette_right.get(f"silhouette/{shape_object}/{seed}") == 1
                and texture_right.get(f"texture/{texture_patch}/{seed}") == 1):
            shape.append(is_shape)
            texture.append(decided - is_shape)
    if not shape:
        return {"value": None, "low": None, "high": None, "n": 0}
    value, low, high = shape_bias_interval(shape, texture, seed=0)
    return {"value": value, "low": low, "high": high, "n": len(shape),
            "shape_decisions": int(sum(shape)), "texture_decisions": int(sum(texture))}


def _pct(cell: dict | None) -> str:
    if not cell or cell.get("value") is None:
        return "–"
    text = f"{100 * cell['value']:.1f}"
    if cell.get("low") is not None:
        text += f" [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}]"
    return text


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default=None, help="run id (default: the latest)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = table(args.store, args.run)
    chance = result["chance"]
    print(f"{result['dataset']}, run {result['run']}: decisions among {result['classes']} classes, chance "
          f"{100 * chance:.2f}%; % with 95% bootstrap CI over images\n" if chance else "")
    ns = {k: next((m[k]["n"] for m in result["models"] if k in m), None) for k in KEYS}
    print("| model | " + " | ".join(f"{h} (n = {ns[k]})" for k, h in zip(KEYS, HEADS))
          + " | shape / texture decisions | shape bias where both cues alone are right (n) |")
    print("|---" * (len(KEYS) + 3) + "|")
    for m in result["models"]:
        d, both = m["decisions"], m["both_cues"] or {}
        print(f"| {m['model']} | " + " | ".join(_pct(m.get(k)) for k in KEYS)
              + f" | {d['shape_decisions']} / {d['texture_decisions']} of {d['conflict_images']} | "
              + (f"{_pct(both)} ({both['n']}: {both.get('shape_decisions')} / {both.get('texture_decisions')})"
                 if both else "–") + " |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
