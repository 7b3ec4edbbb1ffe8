"""Error consistency in the report: do two models get the same images wrong? (Geirhos et al., NeurIPS 2020)

For every pair of models of a run with per-sample top-1 values (right/wrong), Cohen's kappa of their errors
(``metrics.consistency``), per shift family: clean on its own, each family of the shifts measured
(``registry.shift_info(name).family``: noise, blur, weather, digital, extra, cbar, text, background, ...) and
all shifted conditions together. A family pools its conditions: every (condition, image) pair scored by every
model counts once, so kappa is that of the concatenated right/wrong vectors. Its 95% percentile bootstrap
interval resamples images (the sample id, with all of its conditions: an image's difficulty counts once, as
the report's other intervals do, report/stats.py), 1,000 resamples from a generator seeded by (the run's
seed, the family), so the same store gives the same numbers and adding a model moves no other pair's draw.

Models: those with per-sample top-1 values of 0/1; a condition counts when every one of them was scored
under it, on the ids all of them have. A run with fewer than two such models has no section. The Markdown
export is ``consistency.md``; the figure one heat map per family (lower triangle, kappa on a fixed -1..1
scale).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..metrics.consistency import N_BOOT, ErrorTally, KappaMatrix, kappa_matrix
from ..registry import shift_info
from ..results.records import Fields, Samples
from .blocks import blocks_to_markdown, cell
from .failure import CORRUPTION_FAMILIES
from .tables import CLEAN

__all__ = ["FamilyConsistency", "ConsistencySection", "consistency_entries", "consistency_blocks",
           "consistency_figure", "consistency_section", "family_seed", "METRIC", "ALL_SHIFTED", "FAMILY_ORDER"]

METRIC = "top1"  # right/wrong per sample
ALL_SHIFTED = "all shifted"
FAMILY_ORDER = (CLEAN, *CORRUPTION_FAMILIES, "text", "background", "attribute")  # then others by name, then all shifted
_ANNOTATED = 12  # models up to which each heat-map cell carries its number


@dataclass(frozen=True)
class FamilyConsistency(Fields):
    """One family's matrix: the ``models`` (in the run's order), the ``conditions`` pooled and ``matrix``
    (metrics.consistency.KappaMatrix: kappa, its interval, n, units)."""

    family: str
    models: list[str]
    conditions: int
    matrix: KappaMatrix


@dataclass(frozen=True)
class ConsistencySection:
    """What the report adds: a summary (``title``, ``id``, ``blocks``) and its ``figures`` (as ``save`` made them)."""

    title: str
    id: str
    blocks: list[dict[str, Any]]
    figures: list[dict[str, str]] = field(default_factory=list)


def family_seed(seed: int, family: str) -> int:
    """A 128-bit seed from the run's seed and the family: stable across builds and platforms."""
    text = json.dumps([int(seed), "error consistency", family], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "little")


def _right_wrong(s: Samples) -> bool:
    """Whether a record holds one 0/1 value per id (top-1 right/wrong)."""
    v = np.asarray(s.values)
    return v.ndim == 1 and v.shape[0] == len(s.ids) and bool(np.all((v == 0) | (v == 1)))


def _as_bool(values: Any) -> np.ndarray:
    v = np.asarray(values)
    return v.view(bool) if v.dtype == np.uint8 else v.astype(bool)  # 0/1 bytes read as bools, no copy


class _Units:
    """The run's (dataset, sample id) units -> positions, one array per distinct id list (the loader shares one
    list among the conditions that scored the same images, so each list is indexed once)."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}
        self._lists: dict[tuple[str, int], tuple[list[str], np.ndarray]] = {}

    def positions(self, dataset: str, ids: list[str]) -> np.ndarray:
        hit = self._lists.get((dataset, id(ids)))
        if hit is None or hit[0] is not ids:
            pos = np.fromiter((self.index.setdefault((dataset, str(i)), len(self.index)) for i in ids), np.int64,
                              count=len(ids))
            hit = self._lists[(dataset, id(ids))] = (ids, pos)
        return hit[1]


def _aligned(records: list[Samples], units: _Units) -> tuple[np.ndarray, np.ndarray]:
    """The models' right/wrong (M, m) on the ids all of them have under one condition, and those ids' positions."""
    dataset = records[0].dataset
    if all(r.ids is records[0].ids for r in records):
        return np.stack([_as_bool(r.values) for r in records]), units.positions(dataset, records[0].ids)
    positions = [units.positions(dataset, r.ids) for r in records]
    common = positions[0]
    for p in positions[1:]:
        common = np.intersect1d(common, p)
    rows = []
    for p, r in zip(positions, records):
        order = np.argsort(p, kind="stable")
        rows.append(_as_bool(r.values)[order[np.searchsorted(p[order], common)]])
    return np.stack(rows), common


def _family_of(shift: str) -> str:
    return CLEAN if shift == CLEAN else (shift_info(shift).family or "other")


def consistency_entries(samples: Sequence[Samples] | None, seed: int = 0, n_boot: int = N_BOOT,
                        metric: str = METRIC) -> list[FamilyConsistency]:
    """One :class:`FamilyConsistency` per family with a condition every model was scored under, in
    ``FAMILY_ORDER`` (other families by name, ``all shifted`` last, when the run has two shifted families or
    more); [] with fewer than two models with per-sample ``metric`` right/wrong values."""
    by_condition: dict[tuple[str, str, str, Any], dict[str, Samples]] = {}
    for s in samples or ():
        if s.metric == metric and s.kind == "mean" and _right_wrong(s):
            by_condition.setdefault((s.dataset, s.shift, s.params_key, s.key[3]), {})[s.model] = s
    models = list(dict.fromkeys(m for per in by_condition.values() for m in per))
    if len(models) < 2:
        return []
    families: dict[str, list[list[Samples]]] = {}
    units = _Units()
    for (dataset, shift, _, _), per in by_condition.items():
        if len(per) == len(models):  # every model scored under it
            families.setdefault(_family_of(shift), []).append([per[m] for m in models])
            for r in per.values():
                units.positions(dataset, r.ids)  # every unit indexed before any tally is sized
    if len({fam for fam in families if fam != CLEAN}) > 1:
        families[ALL_SHIFTED] = [c for fam, conds in families.items() if fam != CLEAN for c in conds]
    order = {f: i for i, f in enumerate(FAMILY_ORDER)}
    entries = []
    for fam in sorted(families, key=lambda f: (f == ALL_SHIFTED, order.get(f, len(order)), f)):
        tally = ErrorTally(len(models), len(units.index))  # a family at a time: memory for one tally
        for records in families[fam]:
            tally.add(*_aligned(records, units))
        entries.append(FamilyConsistency(fam, models, len(families[fam]),
                                         kappa_matrix(tally, n_boot, seed=family_seed(seed, fam))))
    return entries


def _kappa_text(k: float, low: float, high: float) -> str:
    if not math.isfinite(k):
        return "undefined"
    ci = f" [{low:.2f}, {high:.2f}]" if math.isfinite(low) else " [no defined resample]"
    return f"{k:.2f}{ci}"


def _pair_cell(e: FamilyConsistency, i: int, j: int) -> str | dict[str, Any]:
    p = e.matrix.pair(i, j)
    a, b = e.matrix.accuracy[i], e.matrix.accuracy[j]
    if p.reason is not None:
        return cell("undefined", title=f"{e.models[i]} / {e.models[j]}: {p.reason}")
    left = f"; {p.undefined} of the resamples undefined, left out" if p.undefined else ""
    return cell(_kappa_text(p.kappa, p.low, p.high),
                title=f"{e.models[i]} / {e.models[j]}: n = {p.n} (condition, image) pairs over {p.units} images; "
                      f"observed consistency {p.observed:.3f}, expected {p.expected:.3f} (accuracies {a:.3f}, "
                      f"{b:.3f}){left}")


def _overview(entries: Sequence[FamilyConsistency]) -> dict[str, Any]:
    rows = []
    for e in entries:
        pairs = [(i, j) for i in range(len(e.models)) for j in range(i + 1, len(e.models))]
        defined = [(float(e.matrix.kappa[i, j]), i, j) for i, j in pairs if math.isfinite(e.matrix.kappa[i, j])]
        if defined:
            low, high = min(defined), max(defined)
            mean = f"{np.mean([k for k, _, _ in defined]):.2f}"
            lo = f"{low[0]:.2f} ({e.models[low[1]]} / {e.models[low[2]]})"
            hi = f"{high[0]:.2f} ({e.models[high[1]]} / {e.models[high[2]]})"
        else:
            mean = lo = hi = "undefined"
        rows.append([e.family, str(e.conditions), str(e.matrix.n), str(e.matrix.units), mean, lo, hi])
    return {"kind": "table", "head": ["family", "conditions", "n (condition, image) pairs", "images",
                                      "mean κ over pairs", "lowest pair", "highest pair"], "rows": rows}


def consistency_blocks(entries: Sequence[FamilyConsistency]) -> list[dict[str, Any]]:
    """The report's blocks: how to read it, an overview per family, then each family's matrix (lower triangle:
    a row's model against each earlier model; κ [95% CI], hover: n and the consistencies)."""
    if not entries:
        return []
    blocks: list[dict[str, Any]] = [{"kind": "text", "text": (
        f"Error consistency (Geirhos et al., 2020): Cohen's kappa of two models' per-image {METRIC} errors. "
        "κ = (observed - expected) / (1 - expected), where observed is the share of images both models get right "
        "or both get wrong, and expected the share two independent models with the same accuracies would. κ = 0: "
        "their errors are no more alike than their accuracies make them by chance; 1: the same images wrong; "
        "below 0: errors that avoid each other. A family pools its conditions (each condition and image scored by "
        "every model counts once); the 95% percentile bootstrap interval (1,000 resamples) resamples images, each "
        "with all of the family's conditions, so an image's difficulty counts once. Undefined where both models "
        "are right on every image or both wrong on every one.")}, _overview(entries)]
    for e in entries:
        m = e.matrix
        conditions = f"{e.conditions} condition{'s' if e.conditions != 1 else ''}"
        blocks.append({"kind": "heading",
                       "text": f"{e.family}: {conditions}, n = {m.n} (condition, image) pairs over {m.units} images"})
        head = ["κ [95% CI]", *e.models[:-1]]
        rows = [[e.models[i], *[_pair_cell(e, i, j) if j < i else "" for j in range(len(e.models) - 1)]]
                for i in range(1, len(e.models))]
        blocks.append({"kind": "table", "head": head, "rows": rows})
    return blocks


def _tick(name: str, limit: int = 28) -> str:
    """A model name as a tick label: shortened (the tables have it whole) and with ``$`` kept literal
    (matplotlib would read mathtext between two)."""
    short = name if len(name) <= limit else name[:limit - 1] + "…"
    return short.replace("$", r"\$")


def consistency_figure(entries: Sequence[FamilyConsistency], out: Path, prefix: str,
                       save: Callable[..., dict[str, str]]) -> dict[str, str] | None:
    """One figure (``{prefix}error_consistency.png``): a heat map per family, the lower triangle of kappa on a
    fixed -1..1 scale, each cell's kappa written in it up to 12 models; None when no pair has a kappa.
    ``save(fig, out, name, title, caption)`` writes and embeds it (report/build.py)."""
    if not any(np.isfinite(e.matrix.kappa).any() for e in entries):
        return None  # every pair undefined (models right, or wrong, on every image): the tables say so
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    m = len(entries[0].models)
    k = len(entries)
    ncols = min(k, 6 if m <= 4 else 4 if m <= 8 else 3)  # small matrices side by side: one short row
    nrows = math.ceil(k / ncols)
    side = max(2.6, 0.36 * m + 1.4)
    fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols + 1.0, side * nrows + 0.4), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[k:]:
        ax.axis("off")
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="white")  # the upper triangle: blank
    image = None
    for ax, e in zip(axes.flat, entries):
        data = np.array(e.matrix.kappa[1:, :-1], dtype=float)
        data[np.triu_indices(m - 1, 1)] = np.nan
        shown = np.ma.masked_invalid(data)
        image = ax.imshow(shown, cmap=cmap, vmin=-1, vmax=1)
        ax.set_xticks(range(m - 1), [_tick(x) for x in e.models[:-1]], rotation=60, ha="right", fontsize=6)
        ax.set_yticks(range(m - 1), [_tick(x) for x in e.models[1:]], fontsize=6)
        ax.spines[["top", "right"]].set_visible(False)
        for i in range(m - 1):
            for j in range(i + 1):
                v = data[i, j]
                if not math.isfinite(v):  # undefined: grey, marked
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.85", lw=0))
                if m <= _ANNOTATED:
                    dark = math.isfinite(v) and abs(v) > 0.6
                    ax.text(j, i, f"{v:.2f}" if math.isfinite(v) else "–", ha="center", va="center",
                            fontsize=max(5.0, 8.5 - 0.3 * m), color="white" if dark else "black")
        ax.set_title(f"{_tick(e.family)} (n = {e.matrix.n})", fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="κ of errors")
    figure = save(fig, out, f"{prefix}error_consistency.png", "Error consistency",
                  f"Cohen's kappa of two models' per-image {METRIC} errors, per shift family (a cell: the row's "
                  "model against the column's; 0 = no more alike than chance, 1 = the same images wrong; grey, – : "
                  "undefined, both models right, or both wrong, on every image). The intervals are in the Error "
                  "consistency tables and consistency.md.")
    plt.close(fig)
    return figure


def consistency_section(samples: Sequence[Samples] | None, out: Path, prefix: str, save: Callable[..., dict[str, str]],
                        seed: int = 0) -> ConsistencySection | None:
    """The report's error-consistency section of one run: its blocks, ``{prefix}consistency.md`` written into
    ``out`` and the figure; None (nothing written) for a run with fewer than two models with per-sample top-1."""
    entries = consistency_entries(samples, seed=seed)
    blocks = consistency_blocks(entries)
    if not blocks:
        return None
    (out / f"{prefix}consistency.md").write_text(
        blocks_to_markdown([{"kind": "heading", "level": 2, "text": "Error consistency"}] + blocks), encoding="utf-8")
    figure = consistency_figure(entries, out, prefix, save)
    tag = prefix.rstrip("_")
    return ConsistencySection("Error consistency", f"{tag}-error-consistency".lstrip("-"), blocks,
                              [figure] if figure is not None else [])
