"""Failure points in the report: where each model breaks under each corruption, ranked.

For every (model, shift, params) the run measured at two or more severities, with per-sample values of the
headline metric (a per-image mean, such as top-1) on clean and at each severity for the same images: the
severity at which the metric falls to half of clean (``metrics.failure.failure_point``: linear between
measured severities, with a paired bootstrap CI over images), or "not within" the measured range. Every
measured severity counts, fractional ones included (a grid 1-5:0.25 gives a finer point than 1..5). Ranked
earliest first; the Markdown export is ``failure_points.md``.

Also here, from the same entries: each model's earliest point over the run's corruptions (the headline's
"breaks at" column, :func:`breaks_at`) and one figure per corruption family (:func:`failure_figures`):
the metric against severity per model and corruption, its bootstrap band and the half-of-clean line.

Every entry says its scale (:func:`severity_scale`): ``"severity"``, the 1..5 severities with clean at 0, or
``"level"``, ImageNet-C-bar's own level scale 0..10 (``params: {scale: level}``), whose level 0 is a measured
point of the corruption (the reference's formulas at 0, not always the clean image). A level-scale curve keeps
every measured level, 0 included, is never drawn from clean (clean gives only the target,
``failure_point(from_clean=False)``), and its point is a level. The two scales never share a table, a column or
a ranking: the report ranks each in a table of its own, the headline's "breaks at" reads the severity scale
only, and an export names the scale of every point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..metrics.failure import failure_points
from ..registry import SHIFTS, shift_info
from ..results.records import Fields, Samples
from ..results.store import params_key
from ..severity import canonical
from ..severity import label as severity_label
from ..shifts.corruptions import GROUP_ORDER as _CORRUPTION_GROUPS
from .tables import CLEAN, condition_label

__all__ = ["FailureEntry", "BreaksAt", "failure_entries", "failure_blocks", "breaks_at", "failure_figures",
           "severity_scale", "CORRUPTION_FAMILIES", "FRACTION", "SCALES"]

FRACTION = 0.5  # "breaks at": half of clean
# the scales a failure point can be on, in the order the report shows them: (what a point is called, its range)
SCALES: dict[str, tuple[str, str]] = {"severity": ("severity", "1..5, clean at 0"),
                                      "level": ("level", "ImageNet-C-bar's own 0..10 level scale; level 0 is measured, not clean")}
# the corruption families (registry group of each shift): ImageNet-C's four, its extras, ImageNet-C-bar
CORRUPTION_FAMILIES: tuple[str, ...] = (*_CORRUPTION_GROUPS, "cbar")


@dataclass(frozen=True)
class FailureEntry(Fields):
    """One curve with its failure point: a model under a shift and its params, measured at ``severities`` on
    ``scale`` (``SCALES``), the shift's registry ``group``, and ``point`` (metrics.failure.failure_point)."""

    model: str
    shift: str
    params: dict[str, Any]
    severities: list[Any]
    scale: str
    group: str | None
    point: Any


@dataclass(frozen=True)
class BreaksAt(Fields):
    """Where a model breaks first (:func:`breaks_at`): the ``entry`` of its earliest point, whether any curve
    ``crossed``, over how many corruption curves, and their measured severities."""

    entry: FailureEntry
    crossed: bool
    corruptions: int
    severities: list[Any]


def severity_scale(shift: str, params: dict[str, Any] | None) -> str:
    """The scale a condition's severity is on: ``"level"`` for a C-bar corruption on its own 0..10 level scale
    (``params: {scale: level}``; a chain with a step that takes the chain's severity so), else ``"severity"``.

    >>> severity_scale("sparkles", {"scale": "level"}), severity_scale("sparkles", {}), severity_scale("fog", {})
    ('level', 'severity', 'severity')
    """
    params = params or {}
    if shift == "chain" and isinstance(params.get("shifts"), list):
        free = [s for s in params["shifts"] if isinstance(s, dict) and s.get("severity") is None]
        return "level" if any(severity_scale(str(s.get("name")), s.get("params")) == "level" for s in free) else "severity"
    return "level" if params.get("scale") == "level" and shift_info(shift).family == "cbar" else "severity"


def _scores(values: Any) -> np.ndarray | None:
    x = np.asarray(values, dtype=float)
    return x if x.ndim == 1 and np.all(np.isfinite(x)) and (x.size == 0 or (x.min() >= 0 and x.max() <= 1)) else None


_BATCH_CELLS = 4_000_000  # the scores of the curves computed together (32 MB of float64)


def failure_entries(samples: Sequence[Samples], metric: str, fraction: float = FRACTION,
                    seed: int = 0) -> list[FailureEntry]:
    """One :class:`FailureEntry` per (model, shift, params) with a curve, ranked by scale (``SCALES``' order), then crossed first, earliest point first, then the
    ones that never cross, most likely to cross first. ``severities``: the measured points of the curve on its
    ``scale`` (on the level scale, level 0 among them when measured)."""

    # keyed by the exact severity: 2.5 is its own point of the curve, never merged into 2
    per = {s.key: s for s in samples if s.metric == metric and s.kind == "mean"}
    curves: dict[tuple[str, str, str], list[int | float]] = {}
    scales: dict[tuple[str, str, str], str] = {}
    for (model, shift, pk, severity), s in per.items():
        if shift == CLEAN:
            continue
        scale = scales.setdefault((model, shift, pk), severity_scale(shift, s.params))
        if severity > 0 or (scale == "level" and severity == 0):  # a level 0 is measured; a severity 0 is clean
            curves.setdefault((model, shift, pk), []).append(severity)
    def curve(model: str, shift: str, pk: str, severities: list) -> tuple | None:
        """One curve's (severities, clean scores, shifted scores (k, n), from clean), or None without one."""
        clean = per.get((model, CLEAN, params_key({}), 0))
        if clean is None or len(severities) < 2:
            return None
        clean_values = _scores(clean.values)
        ids = list(clean.ids)
        rows = []
        for sev in severities:
            s = per[(model, shift, pk, sev)]
            values = _scores(s.values)
            if values is None or len(values) != len(s.ids):
                return None  # not per-image scores in [0, 1]: no failure point
            if s.ids is clean.ids or s.ids == ids:  # the same images in the same order (one shared list when loaded)
                rows.append(values)
                continue
            by_id = dict(zip(s.ids, values))
            if set(by_id) != set(ids):  # another image set (a skipped sample): no paired curve
                return None
            rows.append([by_id[i] for i in ids])
        if clean_values is None or len(ids) < 2:
            return None
        return severities, clean_values, np.asarray(rows), scales[(model, shift, pk)] != "level"

    entries, batch, cells = [], [], 0

    def flush() -> None:
        # one draw for the curves of a batch over the same images (each point is the curve's own failure_point);
        # batches of at most _BATCH_CELLS scores, so an ImageNet-sized run never holds every curve at once
        nonlocal batch, cells
        if batch:
            points = failure_points([c for _, c in batch], fraction, seed=seed)
            entries.extend(FailureEntry(*fields, point) for (fields, _), point in zip(batch, points))
        batch, cells = [], 0

    for (model, shift, pk), severities in sorted(curves.items()):
        severities = sorted(severities)  # numerically: 1, 1.5, 2, ...
        found = curve(model, shift, pk, severities)
        if found is None:
            continue
        size = found[2].size + found[1].size
        if batch and (cells + size > _BATCH_CELLS or batch[0][1][1].size != found[1].size):
            flush()
        batch.append(((model, shift, per[(model, shift, pk, severities[0])].params, severities,
                       scales[(model, shift, pk)], shift_info(shift).family), found))
        cells += size
    flush()
    order = list(SCALES)
    return sorted(entries, key=lambda e: (order.index(e.scale), not e.point.crossed,
                                          e.point.severity if e.point.crossed else -e.point.p_crossed, e.model, e.shift))


def _at_first(point: Any, severities: Sequence[float]) -> bool:
    """A level-scale curve already at or below the target at its first measured level: the point is that level."""
    return bool(point.crossed and point.curve and point.curve[0] <= point.target and point.severity == severities[0])


def _severity_text(point: Any, severities: Sequence[float], scale: str = "severity") -> str:
    if not point.crossed:
        return f"not within {severity_label(min(severities))}-{severity_label(max(severities))}"
    high = "beyond the range" if math.isinf(point.high) else f"{point.high:.2f}"
    at = "≤ " if scale == "level" and _at_first(point, severities) else ""  # at or before the first measured level
    return f"{at}{point.severity:.2f} [{point.low:.2f}, {high}]"


def _curve_text(severities: Sequence[Any], curve: Sequence[float], scale: float, on: str = "severity") -> str:
    """The measured curve: ``70.0 60.0 45.0`` when the severities are whole, else each value after its severity
    (``1: 70.0, 1.5: 66.0, ...``), so a finer grid is read at the right positions; on the level scale always
    after its level (``0: 12.5, 5: 62.5, 10: 12.5``): its first point is a measured level, not clean."""
    if on == "severity" and all(isinstance(canonical(s), int) for s in severities):
        return " ".join(f"{scale * v:.1f}" for v in curve)
    return ", ".join(f"{severity_label(s)}: {scale * v:.1f}" for s, v in zip(severities, curve))


def failure_blocks(entries: Sequence[FailureEntry], metric: str, fraction: float = FRACTION) -> list[dict[str, Any]]:
    """The report's blocks (report.blocks) for the failure points: a paragraph and one ranked table per scale
    (``SCALES``; the 1..5 severities first): a level of C-bar's 0..10 scale never sits in a severity column."""
    if not entries:
        return []
    scale = 100.0 if _percent(metric) else 1.0
    blocks: list[dict[str, Any]] = []
    for on in SCALES:
        mine = [e for e in entries if e.scale == on]
        if not mine:
            continue
        head = ["rank", "model", "shift", f"breaks at ({on} where {metric} <= {fraction:g} x clean) [95% CI]",
                f"clean {metric}", f"{metric} at each {on}", "share of resamples that cross"]
        body = []
        for rank, e in enumerate(mine, 1):
            p = e.point
            params = f" {e.params}" if e.params else ""
            body.append([str(rank), e.model, f"{e.shift}{params}", _severity_text(p, e.severities, on),
                         f"{scale * p.clean:.1f}", _curve_text(e.severities, p.curve, scale, on), f"{p.p_crossed:.2f}"])
        if on == "severity":
            text = (f"Where each model breaks: the severity at which {metric} falls to {fraction:g} x its clean value, "
                    "linear between the measured severities (from clean at severity 0 when the first one is already "
                    "below), with a paired bootstrap 95% CI over images (2,000 resamples; an upper end \"beyond the "
                    "range\" means some resamples never cross). Ranked earliest first; \"not within\" marks a curve "
                    "that never falls that far in the measured range.")
        else:
            text = (f"On ImageNet-C-bar's own level scale (0..10, params scale: level), ranked apart from the severities: "
                    f"the level at which {metric} falls to {fraction:g} x its clean value, linear between the measured "
                    "levels. Level 0 is a measured point of the corruption (the reference's formulas at level 0, not "
                    "always the clean image), so a curve is never drawn from clean: clean sets only the target, and a "
                    "curve already at or below it at its first measured level breaks there (\"≤\": at or before it). "
                    "Same CI and \"not within\" as above.")
        if len(blocks):
            blocks.append({"kind": "heading", "text": f"On the {on} scale"})
        blocks += [{"kind": "text", "text": text}, {"kind": "table", "head": head, "rows": body}]
    return blocks


def _percent(metric: str) -> bool:
    return metric.startswith(("top", "acc")) or metric in ("miou", "R@10", "answer_accuracy", "unmatched_rate")


def _corruptions(entries: Sequence[FailureEntry]) -> list[FailureEntry]:
    return [e for e in entries if e.group in CORRUPTION_FAMILIES]


def breaks_at(entries: Sequence[FailureEntry], model: str) -> BreaksAt | None:
    """Where ``model`` breaks first over the run's corruptions (the headline's "breaks at"): a :class:`BreaksAt`
    with the entry of the earliest failure point (ties: the first in
    :func:`failure_entries`' ranking), or, when no curve crosses, ``crossed`` False and the entry most likely
    to (``entry`` then only says which); None when the model has no corruption curve. On the 1..5 severity
    scale only: a C-bar level (0..10) is no severity, so level-scale curves never compete here."""
    mine = [e for e in _corruptions(entries) if e.model == model and e.scale == "severity"]
    if not mine:
        return None
    crossed = [e for e in mine if e.point.crossed]
    first = min(crossed, key=lambda e: e.point.severity) if crossed else mine[0]
    return BreaksAt(first, bool(crossed), len(mine), sorted({s for e in mine for s in e.severities}))


def breaks_at_text(found: BreaksAt | None) -> str:
    """The headline cell's text: ``2.7 (zoom_blur)``, ``never`` or ``–`` (no curve)."""
    if found is None:
        return "–"
    if not found.crossed:
        return "never"
    return f"{found.entry.point.severity:.1f} ({condition_label(found.entry.shift, found.entry.params)})"


def breaks_at_title(found: BreaksAt | None, metric: str, fraction: float = FRACTION) -> str:
    """The headline cell's hover text: the point with its CI and clean value, or why there is none."""
    if found is None:
        return (f"no corruption measured at two or more severities (1..5) with per-sample {metric} values: no failure "
                "point (C-bar's level-scale curves are in Failure points, on their own scale)")
    scale = 100.0 if _percent(metric) else 1.0
    sev = found.severities
    over = (f"over {found.corruptions} corruption curve{'s' if found.corruptions != 1 else ''} "
            f"(severities {severity_label(sev[0])}-{severity_label(sev[-1])}, {len(sev)} measured)")
    if not found.crossed:
        return (f"{metric} stays above {fraction:g} x clean at every measured severity {over}; see Failure points")
    e = found.entry
    p = e.point
    high = "beyond the range" if math.isinf(p.high) else f"{p.high:.2f}"
    return (f"{metric} falls to {fraction:g} x clean ({scale * p.clean:.1f} -> {scale * p.target:.1f}) at severity "
            f"{p.severity:.2f} [95% CI {p.low:.2f}, {high}] under {condition_label(e.shift, e.params)}: the "
            f"earliest {over}, linear between measured severities; see Failure points")


def failure_figures(entries: Sequence[FailureEntry], metric: str, out: Path, prefix: str,
                    save: Callable[..., dict[str, str]], fraction: float = FRACTION) -> list[dict[str, str]]:
    """One figure per corruption family present (``{prefix}failure_{family}.png``): a panel per corruption,
    in it each model's metric against severity (clean at 0, every measured severity at its own x, fractional
    ones included), its 95% bootstrap band, the half-of-clean line (dashed, the model's colour) and the
    failure point (x). ``save(fig, out, name, title, caption)`` writes and embeds it (report/build.py)."""
    mine = _corruptions(entries)
    if not mine:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = {e.name: i for i, e in enumerate(SHIFTS.entries())}
    scale = 100.0 if _percent(metric) else 1.0
    unit = " (%)" if _percent(metric) else ""
    models = list(dict.fromkeys(e.model for e in sorted(mine, key=lambda e: e.model)))
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    figures = []
    for family in CORRUPTION_FAMILIES:
        fam = [e for e in mine if e.group == family]
        if not fam:
            continue
        panels: dict[tuple[str, str], list[FailureEntry]] = {}
        for e in sorted(fam, key=lambda e: (order.get(e.shift, len(order)), e.shift, params_key(e.params), e.model)):
            panels.setdefault((e.shift, params_key(e.params)), []).append(e)
        k = len(panels)
        ncols = min(k, 5)
        nrows = math.ceil(k / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.9 * nrows + 0.5), squeeze=False, sharey=True)
        for ax in axes.flat[k:]:
            ax.axis("off")
        for ax, ((shift, _), curves) in zip(axes.flat, panels.items()):
            top = 0.0
            on_levels = curves[0].scale == "level"  # a panel is one (shift, params): one scale
            for e in curves:
                p, colour = e.point, colours[e.model]
                measured = [float(s) for s in e.severities]
                if on_levels:  # the measured levels alone (0 among them): clean is no point of this scale
                    xs, ys = measured, scale * np.asarray(p.curve)
                    ax.axhline(scale * p.clean, color=colour, ls=":", lw=0.9)
                else:
                    xs, ys = [0.0] + measured, scale * np.asarray((p.clean, *p.curve))
                ax.plot(xs, ys, color=colour, marker="o", ms=2.5, lw=1.3, label=e.model)
                ax.fill_between(measured, scale * np.asarray(p.band_low), scale * np.asarray(p.band_high),
                                color=colour, alpha=0.18, lw=0)
                ax.axhline(scale * p.target, color=colour, ls="--", lw=0.9)
                if p.crossed:
                    ax.plot([p.severity], [scale * p.target], color=colour, marker="x", ms=7, mew=1.8)
                top = max(top, float(e.severities[-1]))
            ax.set_xticks(range(0, math.ceil(top) + 1))
            ax.set_title(condition_label(shift, curves[0].params), fontsize=8)
            ax.set_xlabel("C-bar level (0..10, measured; dotted: clean)" if on_levels else "severity (0 = clean)",
                          fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for row in axes:
            row[0].set_ylabel(f"{metric}{unit}", fontsize=7)
        handles = [plt.Line2D([], [], color=colours[m], marker="o", ms=3, lw=1.3, label=m) for m in models]
        handles.append(plt.Line2D([], [], color="0.3", ls="--", lw=0.9, label=f"{fraction:g} x clean"))
        handles.append(plt.Line2D([], [], color="0.3", ls="", marker="x", ms=6, mew=1.6, label="breaks at"))
        levels = any(e.scale == "level" for e in fam)
        if levels:
            handles.append(plt.Line2D([], [], color="0.3", ls=":", lw=0.9, label="clean (level panels)"))
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
        fig.suptitle(f"{family}: {metric} against {'severity or C-bar level' if levels else 'severity'}", fontsize=9)
        fig.tight_layout(rect=(0, 0.08 if nrows == 1 else 0.04, 1, 1))
        figures.append(save(fig, out, f"{prefix}failure_{family}.png", f"Failure points: {family}",
                            f"{metric} against severity per model under each {family} corruption (clean at 0; every "
                            f"measured severity at its own position, fractional ones included; a panel on C-bar's "
                            f"level scale has the measured levels 0..10 on its x axis and clean as a dotted line), "
                            f"with its 95% "
                            f"bootstrap band over images; dashed: {fraction:g} x the model's clean {metric}; x: where "
                            f"the curve meets it (the failure point)."))
        plt.close(fig)
    return figures
