"""Which classes' textures carry their class: the shipped list behind ``objects-cue-conflict``'s ``texture_classes="kept"``.

A cue-conflict image tests a texture cue only if that texture, alone, says its class. This script measures the
texture-alone control of every class with the three bundled classifiers and writes the verdict to
src/shiftbench/data/cue_conflict_textures.tsv:

    python tools/cue_conflict_textures.py              # measures (about 4 minutes on 2 CPU cores) and writes
    python tools/cue_conflict_textures.py --check      # measures and compares with the shipped file, writes nothing
    python tools/cue_conflict_textures.py --check --classes zebra,corn   # those classes' rows only (seconds)

Rule. Images: ``objects-cue-conflict`` with ``cue="texture"``, ``texture_classes="all"``, ``texture_crops=8``,
seed 0: eight seeded texture crops of every object that gives a texture, each tiled over a 224 px frame.
Decisions: each of efficientnet_lite0/1/2's class among the set's K = 80 classes (``metrics.shape_bias``).
Per class, ``hits`` of ``trials`` (models x objects x crops) decisions name the class; the class is kept when
that count is above chance, 1/K, in an exact one-sided binomial test at level 0.05: P(X >= hits) < 0.05 for
X ~ Binomial(trials, 1/K) (24 trials: at least 2 hits; the three models' decisions are pooled as if
independent, which makes the rule lenient, never strict). A class no object of which gives a texture (its
largest square inside the mask is under 24 px) is not kept either.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shiftbench" / "data" / "cue_conflict_textures.tsv"
MODELS = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")
CROPS = 8
SEED = 0
LEVEL = 0.05
BATCH = 32
COLUMNS = ("wnid", "class", "objects", "trials", "hits", "accuracy", "p_value", "kept")


def binomial_tail(hits: int, trials: int, p: float) -> float:
    """P(X >= hits) for X ~ Binomial(trials, p), exactly (sum of the terms, no approximation).

    >>> round(binomial_tail(2, 24, 1 / 80), 4)
    0.0359
    """
    return min(1.0, sum(math.comb(trials, k) * p ** k * (1 - p) ** (trials - k) for k in range(hits, trials + 1)))


def measure(only: list[str] | None = None) -> list[dict[str, str]]:
    """One row per class of the set (``only``: those classes alone, wnids or ImageNet names), as the file has them."""
    import shiftbench as sb
    from shiftbench.datasets import cue_conflict, objects
    from shiftbench.labelspace import LabelSpace
    from shiftbench.metrics.shape_bias import cue_target, set_decisions

    ds = cue_conflict.CueConflictDataset(seed=SEED, cue="texture", texture_classes=only or "all",
                                         texture_crops=CROPS, textures_per_shape=1)
    samples = [ds.load(i) for i in range(len(ds))]
    targets = [cue_target(s) for s in samples]
    classes = targets[0].classes
    hits: dict[int, int] = {}
    trials: dict[int, int] = {}
    for name in MODELS:
        model = sb.create_model(name)
        for start in range(0, len(samples), BATCH):
            part = samples[start:start + BATCH]
            decisions = set_decisions(model.predict_logits([s.image for s in part]), classes)
            for s, d in zip(part, decisions):
                trials[s.label] = trials.get(s.label, 0) + 1
                hits[s.label] = hits.get(s.label, 0) + int(d == s.label)
        print(f"{name}: {sum(hits.values())} hits so far of {sum(trials.values())}", file=sys.stderr, flush=True)
    chance = 1.0 / len(classes)
    space = LabelSpace.imagenet1k()
    givers = cue_conflict.texture_objects()
    rows = []
    measured = {objects.object_info(o).wnid for o in ds.texture_list}
    for wnid in cue_conflict.set_classes():
        if only and wnid not in measured:
            continue
        label = space.index(wnid)
        n_obj = sum(objects.object_info(o).wnid == wnid for o in givers)
        n, h = trials.get(label, 0), hits.get(label, 0)
        p = binomial_tail(h, n, chance) if n else 1.0
        rows.append({"wnid": wnid, "class": space.class_names[label], "objects": str(n_obj), "trials": str(n),
                     "hits": str(h), "accuracy": f"{h / n:.4f}" if n else "",
                     "p_value": f"{p:.3g}", "kept": "yes" if n and p < LEVEL else "no"})
    return rows


def render(rows: list[dict[str, str]]) -> str:
    kept = sum(r["kept"] == "yes" for r in rows)
    head = [f"# objects-cue-conflict texture check, written by tools/cue_conflict_textures.py (do not edit): {kept} of "
            f"{len(rows)} classes kept.",
            f"# Texture alone ({CROPS} crops per object, seed {SEED}), decisions of {', '.join(MODELS)} among the "
            f"{len(rows)} classes; kept: hits above chance 1/{len(rows)}, exact one-sided binomial p < {LEVEL}.",
            "\t".join(COLUMNS)]
    return "\n".join(head + ["\t".join(r[c] for c in COLUMNS) for r in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file; write nothing")
    ap.add_argument("--classes", default=None, help="with --check: only these classes (comma-separated wnids or "
                    "ImageNet names), compared with their rows of the file")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.classes and not args.check:
        ap.error("--classes measures part of the set: it goes with --check (the file is written from all classes)")
    if args.classes:
        rows = measure([c.strip() for c in args.classes.split(",") if c.strip()])
        shipped = {line.split("\t")[0]: line for line in args.out.read_text("utf-8").splitlines()
                   if line and not line.startswith("#")}
        differ = [r["wnid"] for r in rows if shipped.get(r["wnid"]) != "\t".join(r[c] for c in COLUMNS)]
        for r in rows:
            print("\t".join(r[c] for c in COLUMNS))
        print(f"{args.out}: {len(rows) - len(differ)} of {len(rows)} rows as measured"
              + (f"; differ: {differ}" if differ else ""))
        return 1 if differ else 0
    text = render(measure())
    if args.check:
        same = args.out.is_file() and args.out.read_text("utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from a fresh measurement'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if not line.startswith("#")][1:]
    dropped = [f"{r[1]} ({r[4]}/{r[3]})" for r in rows if r[-1] != "yes"]
    print(f"wrote {args.out}: {len(rows) - len(dropped)} of {len(rows)} classes kept; left out: {', '.join(dropped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
