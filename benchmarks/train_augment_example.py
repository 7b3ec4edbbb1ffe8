"""Worked example: does background and attribute augmentation help a linear head on frozen EfficientNet-Lite0 features?

    python benchmarks/train_augment_example.py [--epochs 8] [--seed 0]
                                               [--json benchmarks/results/train_augment_example.json]
    python benchmarks/train_augment_example.py --quick [--json OUT]   # the smoke run: no results file unless --json

1. Split the built-in ``objects`` dataset by *object*: keep the ImageNet classes with at least two cut-outs
   (11 classes, 25 objects), and per class hold out ``floor(n / 2)`` objects, chosen by a generator seeded
   with ``(seed, class)``. No object instance of the evaluation set is ever seen in training; the head is
   tested on unseen objects of seen classes.
2. Render every object on congruent scenes at seeded placements (``scenes_per_object``: 24 per training
   object, 16 per held-out one; more placements than scenes repeat the scenes with new placements).
3. Features: the input of EfficientNet-Lite0's final linear layer (1280-d, ImageNet weights, frozen),
   from ``shiftbench.analysis.penultimate_features``.
4. Two linear heads on the 11 classes, trained identically (zero init, full-batch Adam, the same steps,
   learning rate and L2 penalty; no randomness): *baseline* on the clean training images; *augmented* on
   ``--epochs`` copies of every training image drawn through a ``ShiftPolicy`` of background shifts
   (colour, texture, scene) and attribute shifts (colour, material, pattern), seeded by
   ``(seed, epoch, index)`` (8 epochs by default). With a full batch, copies of a clean image add nothing,
   so the baseline sees each clean image once. Classes are not reweighted: ox and hog have two training
   objects each, the other nine one.
5. Evaluate both on the held-out objects: clean, and under background, attribute and corruption shifts
   drawn with the shifts' own seeds (``shift(sample, severity=s, seed=seed)``), never the policy's draws.
   Gain = augmented minus baseline top-1, with a 95 % paired bootstrap interval over held-out images
   (``shiftbench.analysis.bootstrap_mean`` on per-image differences of correctness) and a second one that
   resamples held-out *objects* (images of one object are not independent). A family's gain averages each
   image's difference over the family's conditions, then bootstraps. The original ImageNet head,
   restricted to the 11 classes, is shown for reference.

Nothing is cached to disk; the only output is the JSON. ``--quick`` (two placements per training object,
one per held-out object, two epochs) is the smoke test's size: it writes no JSON unless ``--json`` names a
file outside ``benchmarks/results/`` (one there is refused: the committed results are never overwritten).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS_DIR / "train_augment_example.json"

# the augmentation: background and attribute shifts, every variant; weights give each of the six shifts
# the same share, split evenly over its variants
BACKGROUND_COLORS = ("red", "green", "blue", "colorful")
TEXTURES = (1, 2, 3, 4)
ATTRIBUTE_COLORS = ("violet", "pink", "multi-color")
MATERIALS = ("wood", "stone", "metal", "paper")
PATTERNS = ("dotted", "striped")
AUGMENT_P = 0.8
AUGMENT_SEVERITIES = "1-5"

# (condition, family, shift, params, severity); evaluation draws come from the shift's own seed
CONDITIONS: list[tuple[str, str, str | None, dict[str, Any], int | None]] = [
    ("clean", "clean", None, {}, None),
    ("background_scene mixed_rand s5", "background", "background_scene", {"scene": "mixed_rand"}, 5),
    ("background_color red s5", "background", "background_color", {"color": "red"}, 5),
    ("background_texture 3 s5", "background", "background_texture", {"texture": 3}, 5),
    ("attribute_color violet s5", "attribute", "attribute_color", {"color": "violet"}, 5),
    ("attribute_material wood s5", "attribute", "attribute_material", {"material": "wood"}, 5),
    ("attribute_pattern dotted s5", "attribute", "attribute_pattern", {"pattern": "dotted"}, 5),
    ("gaussian_noise s3", "corruption", "gaussian_noise", {}, 3),
    ("motion_blur s3", "corruption", "motion_blur", {}, 3),
    ("fog s3", "corruption", "fog", {}, 3),
    ("jpeg_compression s5", "corruption", "jpeg_compression", {}, 5),
]
FAMILIES = ("background", "attribute", "corruption")

# the head: the same for both
HEAD_STEPS = 1000
HEAD_LR = 0.01
HEAD_L2 = 1e-3  # loss = mean cross-entropy + HEAD_L2 / 2 * ||W||^2 (bias not penalised)

FULL = {"train_placements": 24, "eval_placements": 16, "epochs": 8}
QUICK = {"train_placements": 2, "eval_placements": 1, "epochs": 2}


# -- the split ----------------------------------------------------------------------------------------
def split_objects(seed: int = 0) -> dict[str, Any]:
    """Objects of the classes with >= 2 cut-outs, split by object: ``{"classes", "train", "eval"}``.

    ``classes`` are ImageNet indices (sorted); per class, ``floor(n / 2)`` objects are held out, the first
    of a permutation drawn from ``default_rng([seed, class])``; lists keep the dataset's curation order.

    >>> split = split_objects(0)
    >>> len(split["classes"]), len(split["train"]), len(split["eval"])
    (11, 13, 12)
    >>> set(split["train"]) & set(split["eval"])
    set()
    """
    from shiftbench.datasets import objects

    by_class: dict[int, list[str]] = {}
    for oid in objects.object_ids():
        by_class.setdefault(objects.object_info(oid).imagenet_index, []).append(oid)
    classes = sorted(c for c, ids in by_class.items() if len(ids) >= 2)
    held: set[str] = set()
    for c in classes:
        ids = by_class[c]
        order = np.random.default_rng([seed, c]).permutation(len(ids))
        held.update(ids[k] for k in order[: len(ids) // 2])
    chosen = [oid for oid in objects.object_ids() if objects.object_info(oid).imagenet_index in classes]
    return {"classes": classes, "train": [o for o in chosen if o not in held], "eval": [o for o in chosen if o in held]}


def augment_policy():
    """The training policy: six shifts with equal shares (variants split a shift's share), p = 0.8."""
    from shiftbench.training import ShiftPolicy

    families = [
        [("background_color", {"color": c}) for c in BACKGROUND_COLORS],
        [("background_texture", {"texture": t}) for t in TEXTURES],
        [("background_scene", {"scene": "random"})],
        [("attribute_color", {"color": c}) for c in ATTRIBUTE_COLORS],
        [("attribute_material", {"material": m}) for m in MATERIALS],
        [("attribute_pattern", {"pattern": p}) for p in PATTERNS],
    ]
    shifts = [entry for variants in families for entry in variants]
    weights = [1.0 / len(variants) for variants in families for _ in variants]
    return ShiftPolicy(shifts, p=AUGMENT_P, severities=AUGMENT_SEVERITIES, weights=weights)


# -- features and heads -------------------------------------------------------------------------------
def features(model: Any, images: Sequence[np.ndarray]) -> np.ndarray:
    from shiftbench.analysis import penultimate_features

    return penultimate_features(model, images, batch=32)


def int_string(values: Sequence[int]) -> str:
    """Small ints as one space-separated string (a compact JSON field)."""
    return " ".join(str(int(v)) for v in values)


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def train_head(x: np.ndarray, y: np.ndarray, n_classes: int, steps: int = HEAD_STEPS, lr: float = HEAD_LR,
               l2: float = HEAD_L2) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression, zero-initialised, full-batch Adam for ``steps`` steps: ``(W, b)``.

    No randomness enters, so the same features give the same head."""
    import torch

    xt, yt = torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))
    weight = torch.zeros(n_classes, x.shape[1], requires_grad=True)
    bias = torch.zeros(n_classes, requires_grad=True)
    opt = torch.optim.Adam([weight, bias], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ weight.T + bias, yt) + 0.5 * l2 * (weight ** 2).sum()
        loss.backward()
        opt.step()
    return weight.detach().numpy(), bias.detach().numpy()


def predict(head: tuple[np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    weight, bias = head
    return (x @ weight.T + bias).argmax(axis=1)


def imagenet_head(model: Any, classes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The model's own final layer, restricted to ``classes`` (a reference head, not trained here)."""
    import torch

    fc = [m for m in model.module.modules() if isinstance(m, torch.nn.Linear)][-1]
    idx = list(classes)
    return fc.weight.detach().float().numpy()[idx], fc.bias.detach().float().numpy()[idx]


# -- statistics ---------------------------------------------------------------------------------------
def object_bootstrap(values: np.ndarray, groups: Sequence[str], seed: int = 0, n_boot: int = 2000,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean when whole objects (``groups``) are resampled with replacement."""
    names = sorted(set(groups))
    index = np.array([names.index(g) for g in groups])
    sums = np.bincount(index, weights=values, minlength=len(names))
    counts = np.bincount(index, minlength=len(names)).astype(np.float64)
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, len(names), size=(n_boot, len(names)))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    alpha = (1.0 - level) / 2.0
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha))


def gain_stats(diff: np.ndarray, groups: Sequence[str], seed: int) -> dict[str, float]:
    from shiftbench.analysis import bootstrap_mean

    mean, low, high = bootstrap_mean(diff, seed=seed)
    obj_low, obj_high = object_bootstrap(diff, groups, seed=seed)
    return {"gain": mean, "ci": [low, high], "ci_objects": [obj_low, obj_high]}


# -- the run ------------------------------------------------------------------------------------------
def prepare(seed: int, train_placements: int, eval_placements: int) -> dict[str, Any]:
    """The split and its rendered samples: ``{"split", "train", "eval", "y_train", "y_eval"}`` (labels are
    positions in ``split["classes"]``)."""
    from shiftbench.datasets.objects import ObjectsDataset

    split = split_objects(seed)
    position = {c: k for k, c in enumerate(split["classes"])}
    data: dict[str, Any] = {"split": split}
    for part, placements in (("train", train_placements), ("eval", eval_placements)):
        dataset = ObjectsDataset(seed=seed, objects=split[part], scenes_per_object=placements)
        data[part] = [dataset.load(i) for i in range(len(dataset))]
        data[f"y_{part}"] = np.array([position[s.label] for s in data[part]])
    return data


def training_features(model: Any, samples: Sequence[Any], epochs: int, seed: int,
                      policy: Any = None) -> tuple[np.ndarray, np.ndarray, Counter]:
    """``(clean, augmented, counts)``: features of the clean images, of ``epochs`` policy draws per image
    (epoch-major, seeded by ``(seed, epoch, index)``), and how often each shift was drawn."""
    policy = policy or augment_policy()
    counts: Counter = Counter()
    augmented = []
    for epoch in range(epochs):
        images = []
        for index, sample in enumerate(samples):
            out, record = policy.sample(sample, epoch=epoch, index=index, seed=seed)
            counts[record["shift"] or "none"] += 1
            images.append(out.image)
        augmented.append(features(model, images))
    return features(model, [s.image for s in samples]), np.concatenate(augmented), counts


def condition_features(model: Any, samples: Sequence[Any], condition: str, seed: int) -> np.ndarray:
    """Features of the held-out samples under one condition of CONDITIONS, drawn with the shift's own seed."""
    import shiftbench as sb

    _, _, shift_name, params, severity = next(c for c in CONDITIONS if c[0] == condition)
    if shift_name is None:
        return features(model, [s.image for s in samples])
    shift = sb.create_shift(shift_name, **params)
    return features(model, [shift(s, severity=severity, seed=seed).image for s in samples])


def fit_heads(model: Any, classes: Sequence[int], x_clean: np.ndarray, x_aug: np.ndarray,
              y_train: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The baseline head (clean images), the augmented head (policy draws) and the ImageNet reference."""
    epochs = len(x_aug) // len(x_clean)
    return {"baseline": train_head(x_clean, y_train, len(classes)),
            "augmented": train_head(x_aug, np.tile(y_train, epochs), len(classes)),
            "imagenet": imagenet_head(model, classes)}


def run(epochs: int, train_placements: int, eval_placements: int, seed: int = 0,
        log: Any = print) -> dict[str, Any]:
    import shiftbench as sb

    clock = {"start": time.perf_counter()}
    data = prepare(seed, train_placements, eval_placements)
    split, train_samples, eval_samples = data["split"], data["train"], data["eval"]
    classes, y_train, y_eval = split["classes"], data["y_train"], data["y_eval"]
    eval_objects = [s.meta["object_id"] for s in eval_samples]
    model = sb.create_model("efficientnet_lite0")
    log(f"split: {len(split['train'])} training objects ({len(train_samples)} images), {len(split['eval'])} held-out "
        f"objects ({len(eval_samples)} images), {len(classes)} classes")

    policy = augment_policy()
    x_clean, x_aug_all, applied = training_features(model, train_samples, epochs, seed, policy)
    clock["train_features"] = time.perf_counter()
    heads = fit_heads(model, classes, x_clean, x_aug_all, y_train)
    clock["heads"] = time.perf_counter()
    log(f"training features and heads: {clock['heads'] - clock['start']:.0f} s")

    correct: dict[str, dict[str, np.ndarray]] = {}
    predicted: dict[str, dict[str, str]] = {}
    eval_digests: dict[str, str] = {}
    for name, *_ in CONDITIONS:
        x = condition_features(model, eval_samples, name, seed)
        eval_digests[name] = digest(x)
        guesses = {head: predict(weights, x) for head, weights in heads.items()}
        predicted[name] = {head: int_string(g) for head, g in guesses.items()}
        correct[name] = {head: (g == y_eval).astype(np.float64) for head, g in guesses.items()}
    clock["eval"] = time.perf_counter()

    rows = []
    for name, family, shift_name, params, severity in CONDITIONS:
        c = correct[name]
        rows.append({"condition": name, "family": family, "shift": shift_name, "params": params,
                     "severity": severity, "n": len(y_eval), "baseline": float(c["baseline"].mean()),
                     "augmented": float(c["augmented"].mean()), "imagenet_head": float(c["imagenet"].mean()),
                     **gain_stats(c["augmented"] - c["baseline"], eval_objects, seed)})
    families = []
    for family in FAMILIES:
        names = [r["condition"] for r in rows if r["family"] == family]
        per_image = {h: np.mean([correct[n][h] for n in names], axis=0) for h in ("baseline", "augmented", "imagenet")}
        families.append({"family": family, "conditions": names, "n": len(y_eval),
                         "baseline": float(per_image["baseline"].mean()),
                         "augmented": float(per_image["augmented"].mean()),
                         "imagenet_head": float(per_image["imagenet"].mean()),
                         **gain_stats(per_image["augmented"] - per_image["baseline"], eval_objects, seed)})
    by_object = []  # the unit the object-level interval resamples
    shifted = [r["condition"] for r in rows if r["family"] != "clean"]
    for oid in split["eval"]:
        mine = np.array([o == oid for o in eval_objects])
        entry: dict[str, Any] = {"object": oid, "images": int(mine.sum())}
        for head in ("baseline", "augmented"):
            entry[f"clean_{head}"] = float(correct["clean"][head][mine].mean())
            entry[f"shifted_{head}"] = float(np.mean([correct[n][head][mine].mean() for n in shifted]))
        by_object.append(entry)
    train_acc = {"baseline": float((predict(heads["baseline"], x_clean) == y_train).mean()),
                 "augmented": float((predict(heads["augmented"], x_aug_all) == np.tile(y_train, epochs)).mean())}
    return {
        "config": {"seed": seed, "epochs": epochs, "train_placements": train_placements,
                   "eval_placements": eval_placements, "model": "efficientnet_lite0", "features": "penultimate (1280)",
                   "head": {"kind": "multinomial logistic regression", "init": "zeros", "optimizer": "Adam, full batch",
                            "steps": HEAD_STEPS, "lr": HEAD_LR, "l2": HEAD_L2},
                   "policy": policy.to_dict(), "policy_seed": seed,
                   "conditions": [{"condition": n, "family": f, "shift": s, "params": p, "severity": v, "seed": seed}
                                  for n, f, s, p, v in CONDITIONS],
                   "bootstrap": {"n_boot": 2000, "level": 0.95, "seed": seed}},
        "split": {"classes": classes, "class_names": [train_samples[int(np.argmax(y_train == k))].class_name
                                                      for k in range(len(classes))],
                  "train_objects": split["train"], "eval_objects": split["eval"],
                  "train_images": len(train_samples), "eval_images": len(eval_samples),
                  "train_ids": [s.id for s in train_samples], "eval_ids": [s.id for s in eval_samples],
                  "eval_labels": int_string(y_eval)},
        "augmentation": {"draws": epochs * len(train_samples), "per_shift": dict(sorted(applied.items()))},
        "train_accuracy": train_acc,
        "rows": rows,
        "families": families,
        "objects": by_object,
        # per held-out image (split.eval_ids order), each head's class (a position in split.classes, as
        # split.eval_labels): every figure above, and the confusions, can be rebuilt from these
        "predictions": predicted,
        "digests": {"train_clean": digest(x_clean), "train_augmented": digest(x_aug_all), "eval": eval_digests},
        "seconds": {"train_features_and_heads": clock["heads"] - clock["start"], "eval": clock["eval"] - clock["heads"],
                    "total": time.perf_counter() - clock["start"]},
    }


def pct(v: float) -> str:
    return f"{100 * v:.1f}"


def pp(v: float) -> str:
    """Percentage points with a sign; a value that rounds to zero prints as +0.0, never -0.0."""
    v = round(100 * v, 1)
    return f"{v + 0.0:+.1f}"


def gain_cell(r: dict[str, Any]) -> str:
    return f"{pp(r['gain'])} [{pp(r['ci'][0])}, {pp(r['ci'][1])}]"


def objects_cell(r: dict[str, Any]) -> str:
    return f"[{pp(r['ci_objects'][0])}, {pp(r['ci_objects'][1])}]"


def table(result: dict[str, Any]) -> str:
    lines = ["| condition | baseline top-1 | augmented top-1 | gain, pp [95% CI, images] | 95% CI, objects "
             "| ImageNet head |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['condition']} | {pct(r['baseline'])} | {pct(r['augmented'])} | {gain_cell(r)} | "
                     f"{objects_cell(r)} | {pct(r['imagenet_head'])} |")
    for f in result["families"]:
        lines.append(f"| **{f['family']} (mean of {len(f['conditions'])})** | {pct(f['baseline'])} | "
                     f"{pct(f['augmented'])} | **{gain_cell(f)}** | {objects_cell(f)} | {pct(f['imagenet_head'])} |")
    return "\n".join(lines)


def object_table(result: dict[str, Any]) -> str:
    k = len(CONDITIONS) - 1
    lines = [f"| held-out object | clean: baseline | clean: augmented | {k} shifts: baseline | {k} shifts: augmented |",
             "|---|---|---|---|---|"]
    for o in result["objects"]:
        lines.append(f"| {o['object']} | {pct(o['clean_baseline'])} | {pct(o['clean_augmented'])} | "
                     f"{pct(o['shifted_baseline'])} | {pct(o['shifted_augmented'])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few images (the smoke test): %s" % QUICK)
    ap.add_argument("--epochs", type=int, default=None,
                    help=f"augmented copies per training image (default {FULL['epochs']}, {QUICK['epochs']} with --quick)")
    ap.add_argument("--seed", type=int, default=0, help="split, placements, policy, evaluation shifts, bootstrap")
    ap.add_argument("--json", type=Path, default=None,
                    help="where to write the result (default: benchmarks/results/train_augment_example.json; "
                         "none with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        if args.json is not None and args.json.resolve().is_relative_to(RESULTS_DIR.resolve()):
            ap.error("--quick never writes the committed results file; give another --json or none")
    else:
        args.json = args.json or DEFAULT_JSON
    size = dict(QUICK if args.quick else FULL)
    if args.epochs is not None:
        if args.epochs < 1:
            ap.error(f"--epochs must be >= 1, got {args.epochs}")
        size["epochs"] = args.epochs
    if args.seed < 0:
        ap.error(f"--seed must be >= 0, got {args.seed}")

    from shiftbench.engine.provenance import git_hash, versions

    started = time.perf_counter()
    result = run(seed=args.seed, **size)
    result["seconds"]["wall"] = time.perf_counter() - started
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                         "load_average": os.getloadavg()[0]}
    result["versions"] = versions()
    result["git"] = git_hash()
    split = result["split"]
    print(f"\n{len(split['classes'])} classes; train: {len(split['train_objects'])} objects, {split['train_images']} "
          f"images x {size['epochs']} epochs; held out: {len(split['eval_objects'])} objects, {split['eval_images']} "
          f"images per condition")
    print(f"head training accuracy: baseline {pct(result['train_accuracy']['baseline'])}, "
          f"augmented {pct(result['train_accuracy']['augmented'])} (on its augmented copies)\n")
    print(table(result))
    print()
    print(object_table(result))
    print(f"\nwall time {result['seconds']['wall']:.0f} s (load average {result['machine']['load_average']:.1f} "
          f"on {result['machine']['cpus']} CPUs)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
