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
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..results.store import params_key
from ..severity import canonical
from ..severity import label as severity_label
from ..shifts.corruptions import GROUP_ORDER as _CORRUPTION_GROUPS
from .tables import CLEAN, condition_label

__all__ = ["failure_entries", "failure_blocks", "breaks_at", "failure_figures", "CORRUPTION_FAMILIES", "FRACTION"]

FRACTION = 0.5  # "breaks at": half of clean
# the corruption families (registry group of each shift): ImageNet-C's four, its extras, ImageNet-C-bar
CORRUPTION_FAMILIES: tuple[str, ...] = (*_CORRUPTION_GROUPS, "cbar")


def shift_group(shift: str) -> str | None:
    """The registry's group of a shift ("noise", "blur", ..., "cbar"), None for one not registered."""
    from ..registry import SHIFTS

    if shift not in SHIFTS:
        return None
    group = SHIFTS.entry(shift).meta.get("group")
    return None if group is None else str(group)


def _scores(values: Any) -> np.ndarray | None:
    x = np.asarray(values, dtype=float)
    return x if x.ndim == 1 and np.all(np.isfinite(x)) and (x.size == 0 or (x.min() >= 0 and x.max() <= 1)) else None


def failure_entries(samples: Sequence[dict[str, Any]], metric: str, fraction: float = FRACTION,
                    seed: int = 0) -> list[dict[str, Any]]:
    """One entry per (model, shift, params) with a curve: ``{"model", "shift", "params", "point"}``, ranked
    (crossed first, earliest severity first; then the ones that never cross, most likely to cross first)."""
    from ..metrics.failure import failure_point

    # keyed by the exact severity: 2.5 is its own point of the curve, never merged into 2
    per = {(s["model"], s["shift"], params_key(s["params"]), canonical(s["severity"])): s for s in samples
           if s["metric"] == metric and s.get("kind") == "mean"}
    curves: dict[tuple[str, str, str], list[int | float]] = {}
    for model, shift, pk, severity in per:
        if shift != CLEAN and severity > 0:
            curves.setdefault((model, shift, pk), []).append(severity)
    entries = []
    for (model, shift, pk), severities in sorted(curves.items()):
        clean = per.get((model, CLEAN, params_key({}), 0))
        severities = sorted(severities)  # numerically: 1, 1.5, 2, ...
        if clean is None or len(severities) < 2:
            continue
        clean_values = _scores(clean["values"])
        ids = list(clean["ids"])
        rows = []
        for sev in severities:
            s = per[(model, shift, pk, sev)]
            values = _scores(s["values"])
            if values is None or len(values) != len(s["ids"]):
                break  # not per-image scores in [0, 1]: no failure point
            by_id = dict(zip(s["ids"], values))
            if set(by_id) != set(ids):  # another image set (a skipped sample): no paired curve
                break
            rows.append([by_id[i] for i in ids])
        if clean_values is None or len(rows) != len(severities) or len(ids) < 2:
            continue
        point = failure_point(severities, clean_values, np.asarray(rows), fraction, seed=seed)
        entries.append({"model": model, "shift": shift, "params": per[(model, shift, pk, severities[0])]["params"],
                        "severities": severities, "group": shift_group(shift), "point": point})
    return sorted(entries, key=lambda e: (not e["point"].crossed,
                                          e["point"].severity if e["point"].crossed else -e["point"].p_crossed,
                                          e["model"], e["shift"]))


def _severity_text(point: Any, severities: Sequence[float]) -> str:
    if not point.crossed:
        return f"not within {severity_label(min(severities))}-{severity_label(max(severities))}"
    high = "beyond the range" if math.isinf(point.high) else f"{point.high:.2f}"
    return f"{point.severity:.2f} [{point.low:.2f}, {high}]"


def _curve_text(severities: Sequence[Any], curve: Sequence[float], scale: float) -> str:
    """The measured curve: ``70.0 60.0 45.0`` when the severities are whole, else each value after its severity
    (``1: 70.0, 1.5: 66.0, ...``), so a finer grid is read at the right positions."""
    if all(isinstance(canonical(s), int) for s in severities):
        return " ".join(f"{scale * v:.1f}" for v in curve)
    return ", ".join(f"{severity_label(s)}: {scale * v:.1f}" for s, v in zip(severities, curve))


def failure_blocks(entries: Sequence[dict[str, Any]], metric: str, fraction: float = FRACTION) -> list[dict[str, Any]]:
    """The report's blocks (report.blocks) for the failure points: a paragraph and one ranked table."""
    if not entries:
        return []
    scale = 100.0 if _percent(metric) else 1.0
    head = ["rank", "model", "shift", f"breaks at (severity where {metric} <= {fraction:g} x clean) [95% CI]",
              f"clean {metric}", f"{metric} at each severity", "share of resamples that cross"]
    body = []
    for rank, e in enumerate(entries, 1):
        p = e["point"]
        params = f" {e['params']}" if e["params"] else ""
        body.append([str(rank), e["model"], f"{e['shift']}{params}", _severity_text(p, e["severities"]),
                     f"{scale * p.clean:.1f}", _curve_text(e["severities"], p.curve, scale), f"{p.p_crossed:.2f}"])
    text = (f"Where each model breaks: the severity at which {metric} falls to {fraction:g} x its clean value, "
            "linear between the measured severities (from clean at severity 0 when the first one is already "
            "below), with a paired bootstrap 95% CI over images (2,000 resamples; an upper end \"beyond the "
            "range\" means some resamples never cross). Ranked earliest first; \"not within\" marks a curve "
            "that never falls that far in the measured range.")
    return [{"kind": "text", "text": text}, {"kind": "table", "head": head, "rows": body}]


def _percent(metric: str) -> bool:
    return metric.startswith(("top", "acc")) or metric in ("miou", "R@10")


def _corruptions(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("group", shift_group(e["shift"])) in CORRUPTION_FAMILIES]


def breaks_at(entries: Sequence[dict[str, Any]], model: str) -> dict[str, Any] | None:
    """Where ``model`` breaks first over the run's corruptions (the headline's "breaks at"): ``{"entry",
    "crossed", "corruptions", "severities"}`` with the entry of the earliest failure point (ties: the first in
    :func:`failure_entries`' ranking), or, when no curve crosses, ``crossed`` False and the entry most likely
    to (``entry`` then only says which); None when the model has no corruption curve."""
    mine = [e for e in _corruptions(entries) if e["model"] == model]
    if not mine:
        return None
    crossed = [e for e in mine if e["point"].crossed]
    first = min(crossed, key=lambda e: e["point"].severity) if crossed else mine[0]
    return {"entry": first, "crossed": bool(crossed), "corruptions": len(mine),
            "severities": sorted({s for e in mine for s in e["severities"]})}


def breaks_at_text(found: dict[str, Any] | None) -> str:
    """The headline cell's text: ``2.7 (zoom_blur)``, ``never`` or ``–`` (no curve)."""
    if found is None:
        return "–"
    if not found["crossed"]:
        return "never"
    e = found["entry"]
    return f"{e['point'].severity:.1f} ({condition_label(e['shift'], e['params'])})"


def breaks_at_title(found: dict[str, Any] | None, metric: str, fraction: float = FRACTION) -> str:
    """The headline cell's hover text: the point with its CI and clean value, or why there is none."""
    if found is None:
        return f"no corruption measured at two or more severities with per-sample {metric} values: no failure point"
    scale = 100.0 if _percent(metric) else 1.0
    sev = found["severities"]
    over = (f"over {found['corruptions']} corruption curve{'s' if found['corruptions'] != 1 else ''} "
            f"(severities {severity_label(sev[0])}-{severity_label(sev[-1])}, {len(sev)} measured)")
    if not found["crossed"]:
        return (f"{metric} stays above {fraction:g} x clean at every measured severity {over}; see Failure points")
    e = found["entry"]
    p = e["point"]
    high = "beyond the range" if math.isinf(p.high) else f"{p.high:.2f}"
    return (f"{metric} falls to {fraction:g} x clean ({scale * p.clean:.1f} -> {scale * p.target:.1f}) at severity "
            f"{p.severity:.2f} [95% CI {p.low:.2f}, {high}] under {condition_label(e['shift'], e['params'])}: the "
            f"earliest {over}, linear between measured severities; see Failure points")


def failure_figures(entries: Sequence[dict[str, Any]], metric: str, out: Path, prefix: str,
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

    from ..registry import SHIFTS

    order = {e.name: i for i, e in enumerate(SHIFTS.entries())}
    scale = 100.0 if _percent(metric) else 1.0
    unit = " (%)" if _percent(metric) else ""
    models = list(dict.fromkeys(e["model"] for e in sorted(mine, key=lambda e: e["model"])))
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    figures = []
    for family in CORRUPTION_FAMILIES:
        fam = [e for e in mine if e.get("group", shift_group(e["shift"])) == family]
        if not fam:
            continue
        panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for e in sorted(fam, key=lambda e: (order.get(e["shift"], len(order)), e["shift"],
                                            params_key(e["params"]), e["model"])):
            panels.setdefault((e["shift"], params_key(e["params"])), []).append(e)
        k = len(panels)
        ncols = min(k, 5)
        nrows = math.ceil(k / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.9 * nrows + 0.5), squeeze=False, sharey=True)
        for ax in axes.flat[k:]:
            ax.axis("off")
        for ax, ((shift, _), curves) in zip(axes.flat, panels.items()):
            top = 0.0
            for e in curves:
                p, colour = e["point"], colours[e["model"]]
                xs = [0.0] + [float(s) for s in e["severities"]]
                ax.plot(xs, scale * np.asarray((p.clean, *p.curve)), color=colour, marker="o", ms=2.5, lw=1.3,
                        label=e["model"])
                ax.fill_between(xs[1:], scale * np.asarray(p.band_low), scale * np.asarray(p.band_high),
                                color=colour, alpha=0.18, lw=0)
                ax.axhline(scale * p.target, color=colour, ls="--", lw=0.9)
                if p.crossed:
                    ax.plot([p.severity], [scale * p.target], color=colour, marker="x", ms=7, mew=1.8)
                top = max(top, float(e["severities"][-1]))
            ax.set_xticks(range(0, math.ceil(top) + 1))
            ax.set_title(condition_label(shift, curves[0]["params"]), fontsize=8)
            ax.set_xlabel("severity (0 = clean)", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for row in axes:
            row[0].set_ylabel(f"{metric}{unit}", fontsize=7)
        handles = [plt.Line2D([], [], color=colours[m], marker="o", ms=3, lw=1.3, label=m) for m in models]
        handles.append(plt.Line2D([], [], color="0.3", ls="--", lw=0.9, label=f"{fraction:g} x clean"))
        handles.append(plt.Line2D([], [], color="0.3", ls="", marker="x", ms=6, mew=1.6, label="breaks at"))
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
        fig.suptitle(f"{family}: {metric} against severity", fontsize=9)
        fig.tight_layout(rect=(0, 0.08 if nrows == 1 else 0.04, 1, 1))
        figures.append(save(fig, out, f"{prefix}failure_{family}.png", f"Failure points: {family}",
                            f"{metric} against severity per model under each {family} corruption (clean at 0; every "
                            f"measured severity at its own position, fractional ones included), with its 95% "
                            f"bootstrap band over images; dashed: {fraction:g} x the model's clean {metric}; x: where "
                            f"the curve meets it (the failure point)."))
        plt.close(fig)
    return figures
