"""The report's headline: one line per model with the numbers people cite (RobustBench-style), from store rows.

Per run and model: the clean score of the headline metric, the mean of the k ImageNet-C corruptions the
run has, with mCE and relative mCE only when it has the whole protocol (all 15 corruptions at severities
1-5, top-1: :func:`imagenet_c_coverage`; otherwise the note says why there is none), each ObjectCompose
background family grouped by what it is (natural scenes, synthetic colour and texture backgrounds, custom
prompts) with the controls and the attacks in their own groups, each Pascal-EA attribute family, and for
composed retrieval the mean gamma@10 over image shifts (severity 5) and text shifts (severity 3); a shape-bias
headline (metrics/shape_bias.py) adds the share of cue decisions and the single-cue controls on clean. Every
change is shifted minus clean; every number carries its n, and with an :class:`Uncertainty` its 95% CI,
its p-value and its noise mark, all three from one test named in the cell (``report.stats``).

Pure functions over rows and tables (no I/O); the HTML template renders the returned dicts as they are.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

from ..metrics.robustness import IMAGENET_C_CORRUPTIONS
from ..results.store import params_key
from ..severity import canonical
from ..severity import label as severity_label
from .objectcompose import (ATTACKS, CONTROLS, CUSTOM_FAMILIES, NATURAL_FAMILIES, ROLE_GROUPS, SYNTHETIC_FAMILIES,
                            family_of, role_of)
from .tables import CLEAN, Table

__all__ = ["natural_key", "order_tables", "headline_table", "headline", "imagenet_c_coverage", "NATURAL_FAMILIES",
           "SYNTHETIC_FAMILIES", "CONTROLS", "ATTACKS"]

# ObjectCompose families in the headline's order: natural scenes, synthetic (colour, texture) backgrounds,
# custom prompts, then the two masking controls and the attack, never mixed (report.objectcompose's roles)
_FAMILY_COLUMNS = (*NATURAL_FAMILIES, *SYNTHETIC_FAMILIES, *CUSTOM_FAMILIES, *CONTROLS, *ATTACKS)
SEVERITIES_C = (1, 2, 3, 4, 5)  # ImageNet-C's severities: mCE sums a corruption's errors over all five (only these:
# a run on a finer grid, 1-5:0.25, has them among its severities; its fractional ones never enter the protocol)
_FIXED_ORDER = ("top1", "top5", "ece", "text_similarity", "miou", "foreground_iou", "box_ap", "mask_ap")


def natural_key(metric: str) -> tuple:
    """Sort key: R@1 < R@5 < R@10 < R@50 < R_subset@1..3 < ranks; top1 < top5 < ece; others by name.

    >>> sorted(["R@10", "R_subset@1", "R@5", "mean_rank", "R@1", "R@50"], key=natural_key)
    ['R@1', 'R@5', 'R@10', 'R@50', 'R_subset@1', 'mean_rank']
    """
    m = re.fullmatch(r"(R|R_subset|gamma|gamma_subset)@(\d+)(.*)", metric)
    if m:
        family = ("R", "R_subset", "gamma", "gamma_subset").index(m.group(1))
        return (1, family, int(m.group(2)), m.group(3))
    if metric.endswith("_rank"):
        rank = ("mean_rank", "median_rank").index(metric) if metric in ("mean_rank", "median_rank") else 9
        return (1, 1.5, rank, metric)  # ranks after the recalls, before the gamma rows
    if metric in _FIXED_ORDER:
        return (0, _FIXED_ORDER.index(metric), 0, "")
    return (3, 0, 0, metric)


def order_tables(tables: Sequence[Table], preferred: Sequence[str]) -> list[Table]:
    """The spec's ``metrics:`` order first (names that are metrics, not groups like ``recall``), then natural order."""
    pref = [p for p in preferred]
    return sorted(tables, key=lambda t: (pref.index(t.metric) if t.metric in pref else len(pref), natural_key(t.metric)))


def headline_table(tables: Sequence[Table], preferred: Sequence[str]) -> Table | None:
    """The metric the headline, heat map and severity curves use: R@10 for retrieval, else the spec's first."""
    by_name = {t.metric: t for t in tables}
    if "R@10" in by_name:
        return by_name["R@10"]
    for name in preferred:
        if name in by_name:
            return by_name[name]
    return tables[0] if tables else None


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def _fmt(v: float | None, percent: bool, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    v = 100.0 * v if percent else v
    digits = 1 if percent else 3
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _cell(value: float | None, *, percent: bool, n: int | None, what: str, delta: float | None = None,
          higher_is_better: bool = True, stats: dict[str, Any] | None = None, digits_note: str = "") -> dict[str, Any]:
    """A headline cell: text "value (change)", a CI line, the noise mark, and a tooltip with n and the test."""
    if stats:  # the bootstrap aggregate replaces the plain mean (same statistic, plus its interval)
        value = stats.get("value", value)
        delta = stats.get("delta", delta) if stats.get("delta") is not None else delta
        n = stats.get("n", n)
    text = _fmt(value, percent)
    if delta is not None:
        text += f" ({_fmt(delta, percent, signed=True)})"
    title = [what, f"n = {n} samples per condition" if n else "n not recorded"]
    if digits_note:
        title.append(digits_note)
    ci, cls = "", ""
    if stats and stats.get("low") is not None and stats.get("high") is not None:
        ci = f"[{_fmt(stats['low'], percent)}, {_fmt(stats['high'], percent)}]"
        title.append(f"95% bootstrap CI of the value {ci}")
    test = (stats or {}).get("test") or "paired test"
    if stats and stats.get("delta_low") is not None and stats.get("delta_high") is not None:
        title.append(f"95% CI of the change [{_fmt(stats['delta_low'], percent, True)}, "
                     f"{_fmt(stats['delta_high'], percent, True)}] ({test})")
    if stats and stats.get("p_value") is not None:
        title.append(f"p = {stats['p_value']:.3g} ({test}, against clean)")
    noise = bool(stats and stats.get("noise"))
    if noise:
        text += " ≈"
        cls = "noise"
        title.append(f"≈: within noise, p >= 0.05 ({test})")
    elif delta is not None and delta != 0:
        cls = "down" if (delta < 0) == higher_is_better else "up"
    return {"text": text, "ci": ci, "title": "; ".join(title), "cls": cls, "n": n}


def _conditions(rows: Sequence[dict[str, Any]]) -> list[tuple[str, dict, int | float]]:
    seen: dict[tuple, tuple[str, dict, int | float]] = {}
    for r in rows:
        severity = canonical(r["severity"])  # 2.5 is its own condition, never merged into 2
        seen.setdefault((r["shift"], params_key(r["params"]), severity),
                        (r["shift"], dict(r["params"] or {}), severity))
    return list(seen.values())


def _protocol_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows at ImageNet-C's whole severities 1-5 (what its published protocol averages)."""
    return [r for r in rows if canonical(r["severity"]) in SEVERITIES_C]


def _groups(rows: Sequence[dict[str, Any]], metric: str) -> list[tuple[str, str, str, list[dict[str, Any]]]]:
    """(group label, column key, column head, the metric's rows of that column), in display order."""
    from .pascal_ea import attribute_value

    mrows = [r for r in rows if r["metric"] == metric and r["shift"] != CLEAN]
    out: list[tuple[str, str, str, list[dict[str, Any]]]] = []
    corr = [r for r in mrows if r["shift"] in IMAGENET_C_CORRUPTIONS]
    corr_ids = {id(r) for r in corr}  # all of them ImageNet-C's, also the fractional rows its mean leaves out
    if corr:
        k = len({r["shift"] for r in corr})
        # "ImageNet-C" only for the whole protocol; a few of its corruptions are "corruptions"
        full = imagenet_c_coverage(rows, metric)["full"]
        group = "ImageNet-C" if full else "corruptions"
        # the protocol's mean is over its severities 1-5; a finer grid's fractional rows stay out of it (they
        # are in the per-severity tables, the curves and the failure points)
        out.append((group, "corruptions", f"mean of {k} corruption{'s' if k != 1 else ''}",
                    _protocol_rows(corr) if full else corr))
    from ..shifts.cbar._base import cbar_levels  # the published table: C-bar's ten, a column of their own

    cbar = [r for r in mrows if r["shift"] in cbar_levels()]
    if cbar:
        k = len({r["shift"] for r in cbar})
        out.append(("ImageNet-C-bar", "cbar", f"mean of {k} C-bar corruption{'s' if k != 1 else ''}", cbar))
    families: dict[str, list[dict[str, Any]]] = {}
    for r in mrows:
        fam = family_of(r["shift"], r["params"])
        if fam is not None:
            families.setdefault(fam, []).append(r)
    for fam in _FAMILY_COLUMNS:  # grouped by what they are: natural scenes, synthetic backgrounds, ...
        if fam in families:
            group = ROLE_GROUPS[role_of(fam)]
            out.append((group, f"family:{fam}", fam, families[fam]))
            if fam == "mixed_rand" and "mixed_same" in families:
                out.append((group, "bg_gap", "BG-Gap", []))  # Mixed-Same minus Mixed-Rand, per model
    attributes: dict[str, list[dict[str, Any]]] = {}
    for r in mrows:
        if attribute_value(r["shift"], r["params"] or {}) is not None:
            attributes.setdefault(r["shift"][len("attribute_"):], []).append(r)
    for fam in ("color", "material", "pattern", "style"):
        if fam in attributes:
            out.append(("attribute edits", f"attribute:{fam}", fam, attributes.pop(fam)))
    # text corruptions (composed retrieval) in a column of their own
    claimed = {id(r) for _, _, _, grows in out for r in grows} | corr_ids
    text = [r for r in mrows if id(r) not in claimed and _text_shift(r["shift"])]
    if text:
        k = len({(r["shift"], params_key(r["params"])) for r in text})
        out.append(("text corruptions", "text", f"mean of {k} text shift{'s' if k != 1 else ''}", text))
    # whatever no family claims still gets a column, so no shift of the run is missing from the headline
    claimed = {id(r) for _, _, _, grows in out for r in grows} | corr_ids
    rest = [r for r in mrows if id(r) not in claimed]
    if rest:
        k = len({(r["shift"], params_key(r["params"])) for r in rest})
        out.append(("other shifts", "other", f"mean of {k} other shift{'s' if k != 1 else ''}", rest))
    return out


def _gap_cell(model: str, metric: str, pct: bool, groups: Sequence[tuple[str, str, str, list[dict[str, Any]]]],
              unc: Any) -> dict[str, Any]:
    """The BG-Gap cell of one model: Mixed-Same minus Mixed-Rand (means over their conditions), signed, with
    its paired 95% bootstrap CI when the store has per-sample values."""
    sides = {key: [r for r in grows if r["model"] == model] for _, key, _, grows in groups
             if key in ("family:mixed_same", "family:mixed_rand")}
    same, rand = sides.get("family:mixed_same") or [], sides.get("family:mixed_rand") or []
    vs, vr = _mean(r["value"] for r in same), _mean(r["value"] for r in rand)
    if vs is None or vr is None:
        return {"text": "–", "ci": "", "title": "", "cls": "", "n": None}
    gap = vs - vr
    res = unc.contrast([model], metric, _conditions(same), _conditions(rand)) if unc is not None else None
    title = [f"BG-Gap = Mixed-Same {_fmt(vs, pct)} - Mixed-Rand {_fmt(vr, pct)}" + (" points" if pct else ""),
             f"n = {same[0]['n']} samples per condition" if same[0].get("n") else "n not recorded"]
    ci, cls = "", ("down" if gap > 0 else "up" if gap < 0 else "")
    test = (res or {}).get("test") or "paired test"
    if res and res.get("low") is not None:
        ci = f"[{_fmt(res['low'], pct, True)}, {_fmt(res['high'], pct, True)}]"
        title.append(f"95% CI {ci} ({test})")
        if res.get("p_value") is not None:
            title.append(f"p = {res['p_value']:.3g} ({test}, Mixed-Same against Mixed-Rand)")
    text = _fmt(gap, pct, signed=True)
    if res and res.get("noise"):
        text += " ≈"
        cls = "noise"
        title.append(f"≈: the gap is within noise, p >= 0.05 ({test})")
    return {"text": text, "ci": ci, "title": "; ".join(title), "cls": cls, "n": same[0].get("n")}


def _text_shift(name: str) -> bool:
    from ..registry import SHIFTS

    return name in SHIFTS and getattr(SHIFTS.get(name), "kind", "image") == "text"


def headline(rows: Sequence[dict[str, Any]], tables: Sequence[Table], preferred: Sequence[str],
             unc: Any = None, baseline: str = CLEAN,
             failures: Sequence[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The headline of one run: ``{"metric", "groups": [(label, span)], "columns": [{"head", "title"}],
    "rows": [{"model", "n", "cells": [cell]}], "note"}``; columns that do not apply to the run are left out.
    ``baseline``: what the unshifted condition is called, ``clean`` unless the run read a folder written by
    generate (then the shift and severity it was made under, report/build.py). ``failures``: the run's
    failure points of the headline metric (``report.failure.failure_entries``); with a corruption curve
    among them, a last column "breaks at" gives each model's earliest point over the corruptions."""
    main = headline_table(tables, preferred)
    if main is None:
        return None
    metric, pct = main.metric, main.percent
    unit = " (%)" if pct else ""
    index = {(r["model"], r["shift"], params_key(r["params"]), canonical(r["severity"]), r["metric"]): r for r in rows}
    groups = _groups(rows, metric)
    # mCE is defined on top-1 errors over the whole protocol: shown for runs that measured top1 under all 15
    # corruptions at severities 1-5 (their own parameters), whatever the headline metric; never from a part
    coverage = imagenet_c_coverage(rows, "top1")
    corr_top1 = [r for r in _protocol_rows(rows) if r["metric"] == "top1" and r["shift"] in IMAGENET_C_CORRUPTIONS
                 and not r["params"]] if coverage["full"] else []
    gamma_sets = _gamma_sets(rows)
    columns = _columns(main, groups, bool(corr_top1), gamma_sets)
    models = main.models
    cue_controls = _cue_controls(rows, metric)
    columns += [{"group": group, "head": head, "title": title} for _, group, head, title in cue_controls]
    breaks = _has_breaks(main, failures)
    if breaks:
        from .failure import FRACTION

        columns.append({"group": "failure point", "head": "breaks at",
                        "title": f"the earliest severity (1..5), over the run's corruptions, at which {metric} falls "
                                 f"to {FRACTION:g} x clean (linear between measured severities, fractional ones "
                                 "included), and the corruption; never: no corruption curve gets there; C-bar's "
                                 "level-scale (0..10) curves are not severities: Failure points ranks them apart"})
    out_rows = []
    for model in models:
        clean_cell = main.cells.get((CLEAN, model))
        cells = _family_cells(model, main, groups, unc)
        if corr_top1:
            cells += _mce_cells(model, corr_top1, index)
        cells += [_gamma_cell(model, label, sel, unc) for label, sel in gamma_sets]
        cells += [_cue_cell(model, key, head, rows, unc) for key, _, head, _ in cue_controls]
        if breaks:
            cells.append(_breaks_cell(model, failures or [], metric))
        out_rows.append({"model": model, "n": clean_cell.n if clean_cell else None, "cells": cells})
    if baseline != CLEAN:  # the first column is what the run read unshifted, which is not clean
        columns[0] = {"group": baseline, "head": columns[0]["head"],
                      "title": f"{metric}{unit} on the data as read: {baseline}"}
        for r in out_rows:
            r["cells"][0]["title"] = r["cells"][0]["title"].replace(f"clean {metric}", f"{metric} on {baseline}", 1)
    columns, spans = _keep_groups_together(columns, out_rows)
    ci = (" Second line: 95% bootstrap CI of the value; ≈ marks a change within noise, p >= 0.05 in its paired "
          "test (hover a cell for the test, its p and its CI of the change)." if unc is not None
          else " No per-sample values in this store: no confidence intervals.")
    note = (f"One line per model. Each cell: {metric}{unit} and, in brackets, its change against clean "
            f"(shifted minus clean: negative is worse for a higher-is-better metric), mean over the column's "
            f"conditions and severities; n = samples per condition (hover a cell for details).{ci}"
            + _mce_note(coverage) + (_BREAKS_NOTE if breaks else "") + (_CUE_NOTE if cue_controls else ""))
    return {"metric": metric, "groups": [tuple(s) for s in spans], "columns": columns, "rows": out_rows, "note": note,
            "pairs": _pairs(models, metric, pct, rows, groups, unc)}


_BREAKS_NOTE = (" Breaks at: each model's earliest failure point over the run's corruptions, the severity (1..5) "
                "where the metric falls to half of clean (and under which corruption; never: no curve gets there "
                "within the measured severities; all of them in Failure points, C-bar's level-scale curves on their "
                "own 0..10 scale).")


_CUE_NOTE = (" Shape bias (Geirhos et al., ICLR 2019): shape decisions / (shape + texture decisions) on the "
             "cue-conflict images, each decision the top class among the set's classes; single-cue controls: the "
             "same decisions on the texture alone (texture class) and on the silhouette alone (shape class), chance "
             "= 1 / the set's classes.")

# the shape-bias metric's other rows (metrics/shape_bias.py), shown beside it: (row metric, group, head, title)
_CUE_COLUMNS = (("cue_decided", "cue conflict", "cue decided (%)", "cue-conflict images decided by either cue (the "
                 "shape or the texture class): the decisions shape bias is taken over"),
                ("texture_alone_acc", "single-cue controls", "texture alone (%)", "accuracy on the texture-alone "
                 "images (the texture class), decisions among the set's classes"),
                ("silhouette_alone_acc", "single-cue controls", "silhouette alone (%)", "accuracy on the "
                 "silhouette-alone images (the shape class), decisions among the set's classes"),
                ("cue_chance", "single-cue controls", "chance (%)", "1 / the number of the set's classes"))


def _cue_controls(rows: Sequence[dict[str, Any]], metric: str) -> list[tuple[str, str, str, str]]:
    """The controls' columns of a shape-bias headline: those of ``_CUE_COLUMNS`` the run's clean rows have."""
    if metric != "shape_bias":
        return []
    have = {r["metric"] for r in rows if r["shift"] == CLEAN}
    return [c for c in _CUE_COLUMNS if c[0] in have]


def _cue_cell(model: str, key: str, head: str, rows: Sequence[dict[str, Any]], unc: Any) -> dict[str, Any]:
    """A model's clean value of one control row of shape_bias, with its 95% bootstrap CI over images."""
    mine = [r for r in rows if r["model"] == model and r["metric"] == key and r["shift"] == CLEAN]
    value = _mean(r["value"] for r in mine)
    stats = (unc.aggregate(model, key, _conditions(mine), against_clean=False)
             if unc is not None and mine and unc.has(model, key) else None)
    return _cell(value, percent=True, n=mine[0]["n"] if mine else None, what=f"{head} on clean", stats=stats)


def _has_breaks(main: Table, failures: Sequence[dict[str, Any]] | None) -> bool:
    """Whether the headline gets the "breaks at" column: a higher-is-better metric with a corruption curve."""
    if not failures or not main.higher_is_better:
        return False
    from .failure import breaks_at

    return any(breaks_at(failures, m) is not None for m in main.models)


def _breaks_cell(model: str, failures: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """A model's "breaks at" cell (report.failure.breaks_at): ``2.7 (zoom_blur)``, ``never`` or ``–``."""
    from .failure import breaks_at, breaks_at_text, breaks_at_title

    found = breaks_at(failures, model)
    n = found["entry"]["point"].n if found else None
    cls = "down" if found and found["crossed"] else ""
    return {"text": breaks_at_text(found), "ci": "", "title": breaks_at_title(found, metric), "cls": cls, "n": n}


def _gamma_sets(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The γ@10 rows of a composed retrieval run, as (label, rows): image shifts at severity 5, text shifts at
    severity 3; none for other runs."""
    gamma_sets: list[tuple[str, list[dict[str, Any]]]] = []
    if "gamma@10" in {r["metric"] for r in rows}:
        g = [r for r in rows if r["metric"] == "gamma@10" and r["shift"] != CLEAN]
        image = [r for r in g if not _text_shift(r["shift"]) and canonical(r["severity"]) == 5]
        text = [r for r in g if _text_shift(r["shift"]) and canonical(r["severity"]) == 3]
        for label, sel in (("image shifts, severity 5", image), ("text shifts, severity 3", text)):
            if sel:
                gamma_sets.append((label, sel))
    return gamma_sets


def _columns(main: Table, groups: Sequence[tuple[str, str, str, list[dict[str, Any]]]], mce: bool,
             gamma_sets: Sequence[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, str]]:
    """The headline's columns, in the order of a row's cells: clean, each group, mCE, γ@10."""
    metric, hib = main.metric, main.higher_is_better
    unit = " (%)" if main.percent else ""
    columns: list[dict[str, str]] = [{"group": "clean", "head": f"{metric}{unit}",
                                      "title": f"clean {metric}{unit}, {'higher' if hib else 'lower'} is better"}]
    for group, key, head, grows in groups:
        if key == "bg_gap":
            columns.append({"group": group, "head": head,
                            "title": f"BG-Gap: {metric}{unit} on Mixed-Same minus Mixed-Rand, in points (Xiao et "
                                     "al., Noise or Signal, ICLR 2021); positive = the model relies on a fitting "
                                     "background"})
            continue
        k = len(_conditions([r for r in grows if r["model"] == grows[0]["model"]]))
        which = "ImageNet-C's severities 1-5" if group == "ImageNet-C" else "all severities run"
        columns.append({"group": group, "head": head,
                        "title": f"{metric}{unit}: mean over {k} condition(s) of {head} ({which}), "
                                 "and its change against clean (shifted minus clean)"})
    if mce:
        note = ("AlexNet-normalised with ImageNet-C's published AlexNet errors; errors = 1 − top1; "
                "lower is better (100 = AlexNet)")
        columns.append({"group": "ImageNet-C", "head": "mCE", "title": "mean corruption error (%), " + note})
        columns.append({"group": "ImageNet-C", "head": "rel. mCE",
                        "title": "relative mean corruption error (%): error added by the corruptions, " + note})
    for label, _ in gamma_sets:
        columns.append({"group": "composed retrieval", "head": f"γ@10 {label}",
                        "title": f"mean relative robustness γ@10 = R@10 shifted / R@10 clean over {label}; "
                                 "1 = no loss, above 1 = the shift helped"})
    return columns


def _family_cells(model: str, main: Table, groups: Sequence[tuple[str, str, str, list[dict[str, Any]]]],
                  unc: Any) -> list[dict[str, Any]]:
    """A model's clean cell and its cell for each group: the mean over the group's conditions and its change
    against clean, or the BG-Gap."""
    metric, pct, hib = main.metric, main.percent, main.higher_is_better
    clean_cell = main.cells.get((CLEAN, model))
    clean = clean_cell.value if clean_cell else None
    n = clean_cell.n if clean_cell else None
    has = unc is not None and unc.has(model, metric)
    stats = None
    if clean_cell is not None and getattr(clean_cell, "low", None) is not None:
        stats = {"value": clean, "low": clean_cell.low, "high": clean_cell.high, "n": n}
    cells = [_cell(clean, percent=pct, n=n, what=f"clean {metric}", stats=stats)]
    for _, key, head, grows in groups:
        if key == "bg_gap":
            cells.append(_gap_cell(model, metric, pct, groups, unc if has else None))
            continue
        mine = [r for r in grows if r["model"] == model]
        value = _mean(r["value"] for r in mine)
        delta = None if value is None or clean is None else value - clean
        agg = unc.aggregate(model, metric, _conditions(mine)) if has and mine else None
        cells.append(_cell(value, percent=pct, n=mine[0]["n"] if mine else None, delta=delta,
                           higher_is_better=hib, stats=agg, what=f"{metric} under {head}, mean over "
                           f"{len(mine)} condition(s); change = shifted minus clean"))
    return cells


def _gamma_cell(model: str, label: str, sel: Sequence[dict[str, Any]], unc: Any) -> dict[str, Any]:
    """A model's mean γ@10 over one set of conditions; its noise mark and test come from the paired change in R@10."""
    mine = [r for r in sel if r["model"] == model]
    value = _mean(r["value"] for r in mine)
    has = unc is not None and unc.has(model, "R@10")
    agg = unc.aggregate(model, "R@10", _conditions(mine)) if has and mine else None
    cell = _cell(value, percent=False, n=mine[0]["n"] if mine else None,
                 what=f"mean γ@10 over {len(mine)} {label}")
    if agg:  # gamma = 1 + change / clean: the noise mark and test come from the paired change in R@10
        cell = _cell(value, percent=False, n=agg.get("n"), what=f"mean γ@10 over {len(mine)} {label}",
                     stats={"noise": agg.get("noise"), "p_value": agg.get("p_value"), "test": agg.get("test"),
                            "delta_low": agg.get("delta_low"), "delta_high": agg.get("delta_high"), "value": value})
        cell["title"] = cell["title"].replace("CI of the change", "CI of the change in R@10 (fraction)")
    return cell


def _keep_groups_together(columns: list[dict[str, str]],
                          out_rows: list[dict[str, Any]]) -> tuple[list[dict[str, str]], list[list[Any]]]:
    """Reorder the columns (and every row's cells alike) so that each group's columns are together, groups in
    order of first appearance (mCE joins the ImageNet-C mean); returns the columns and the [group, span] list."""
    first: dict[str, int] = {}
    for i, c in enumerate(columns):
        first.setdefault(c["group"], i)
    perm = sorted(range(len(columns)), key=lambda i: (first[columns[i]["group"]], i))
    columns = [columns[i] for i in perm]
    for r in out_rows:
        r["cells"] = [r["cells"][i] for i in perm]
    spans: list[list[Any]] = []
    for c in columns:
        if spans and spans[-1][0] == c["group"]:
            spans[-1][1] += 1
        else:
            spans.append([c["group"], 1])
    return columns, spans


def _pairs(models: Sequence[str], metric: str, pct: bool, rows: Sequence[dict[str, Any]],
           groups: Sequence[tuple[str, str, str, list[dict[str, Any]]]], unc: Any) -> dict[str, Any] | None:
    """Each model against the run's first model on the same samples (paired): the difference on clean and on
    each headline column, its 95% CI and p-value from one test (exact McNemar for top-1/top-5 on one
    condition, else the paired bootstrap), ≈ where that p >= 0.05 (the CI then contains 0). None without
    per-sample values or with one model."""
    if unc is None or len(models) < 2 or not all(unc.has(m, metric) for m in models):
        return None
    base = models[0]
    clean = [(c["shift"], c["params"], canonical(c["severity"])) for c in rows
             if c["metric"] == metric and c["shift"] == CLEAN and c["model"] == base][:1]
    cols = [("clean", clean)] + [(head, _conditions([r for r in grows if r["model"] == base]))
                                 for _, _, head, grows in groups]
    cols = [(head, conds) for head, conds in cols if conds]
    scale = 100.0 if pct else 1.0
    digits = 1 if pct else 3
    out = []
    for model in models[1:]:
        cells = []
        for head, conds in cols:
            cmp = unc.compare(base, model, metric, conds)
            if not cmp or cmp.get("diff") is None:
                cells.append({"text": "–", "title": "", "cls": ""})
                continue
            d = scale * cmp["diff"]
            ci = (f"[{scale * cmp['low']:+.{digits}f}, {scale * cmp['high']:+.{digits}f}]"
                  if cmp.get("low") is not None and cmp.get("high") is not None else "")
            p = cmp.get("p_value")
            noise = bool(cmp.get("noise"))
            test = cmp.get("test") or "paired test"
            cells.append({"text": f"{d:+.{digits}f}" + (" ≈" if noise else ""), "ci": ci,
                          "title": f"{model} minus {base}, {metric} under {head}: paired over n = {cmp.get('n')} "
                                   f"samples" + (f"; 95% CI {ci}" if ci else "") + (f", p = {p:.3g}" if p is not None else "")
                                   + f" ({test})" + ("; ≈ within noise, p >= 0.05" if noise else ""),
                          "cls": "noise" if noise else ("up" if d > 0 else "down" if d < 0 else "")})
        out.append({"label": f"{model} − {base}", "cells": cells})
    return {"base": base, "heads": [h for h, _ in cols], "rows": out,
            "note": f"Each model minus {base} on the same samples (paired), {metric}{' in points' if pct else ''}: "
                    "the difference, its 95% CI (second line) and p-value (hover), from one test (exact McNemar for "
                    "top-1/top-5 on one condition, else the paired bootstrap); ≈ = within noise, p >= 0.05."}


def imagenet_c_coverage(rows: Sequence[dict[str, Any]], metric: str = "top1") -> dict[str, Any]:
    """How much of the ImageNet-C protocol a run's ``metric`` rows cover: ``{"full", "corruptions",
    "severities"}``; ``full`` when every model with the metric has all 15 corruptions at severities 1-5, each
    with the corruption's own parameters (no ``params``), the only case in which mCE and relative mCE are
    defined; ``corruptions`` / ``severities``: those of the rows, whatever their parameters.

    >>> rows = [dict(model="m", metric="top1", shift=c, params={}, severity=s, value=0.5)
    ...         for c in ("gaussian_noise", "fog", "snow") for s in (3, 5)]
    >>> imagenet_c_coverage(rows)
    {'full': False, 'corruptions': ['fog', 'gaussian_noise', 'snow'], 'severities': [3, 5]}
    """
    mine = [r for r in rows if r["metric"] == metric]
    corr = [r for r in mine if r["shift"] in IMAGENET_C_CORRUPTIONS]
    protocol = {(c, s) for c in IMAGENET_C_CORRUPTIONS for s in SEVERITIES_C}
    have: dict[str, set[tuple[str, int]]] = {r["model"]: set() for r in mine}
    for r in corr:
        if not r["params"] and r.get("value") is not None:
            have[r["model"]].add((r["shift"], canonical(r["severity"])))
    full = bool(have) and all(protocol <= got for got in have.values())
    return {"full": full, "corruptions": sorted({r["shift"] for r in corr}),
            "severities": sorted({canonical(r["severity"]) for r in corr})}


def _mce_note(coverage: dict[str, Any]) -> str:
    """One sentence on why a top-1 run with some corruptions shows no mCE ("" when it shows one, or has none)."""
    k, sev = len(coverage["corruptions"]), coverage["severities"]
    if coverage["full"] or not k:
        return ""
    where = f" at severit{'y' if len(sev) == 1 else 'ies'} {', '.join(map(severity_label, sev))}"
    return (f" No mCE or relative mCE: they are defined over all {len(IMAGENET_C_CORRUPTIONS)} ImageNet-C "
            f"corruptions at severities 1-5 (top-1, the corruptions' own parameters); this run has {k} of "
            f"{len(IMAGENET_C_CORRUPTIONS)}{where}, so the headline shows their mean (mean of {k} "
            f"corruption{'s' if k != 1 else ''}).")


def _mce_cells(model: str, corr: Sequence[dict[str, Any]], index: dict) -> list[dict[str, Any]]:
    from ..metrics.robustness import mean_corruption_error, relative_mean_corruption_error

    errors: dict[str, list[float]] = {}
    # the protocol's five whole severities only, in order (a finer grid's 1.5, 2.5, ... never enter mCE)
    for r in sorted((r for r in _protocol_rows(corr) if r["model"] == model and r["value"] is not None),
                    key=lambda r: (r["shift"], canonical(r["severity"]))):
        errors.setdefault(r["shift"], []).append(1.0 - r["value"])
    clean = next((r for k, r in index.items() if k[0] == model and k[1] == CLEAN and k[4] == "top1"), None)
    n = clean["n"] if clean else None
    if not errors:
        return [_cell(None, percent=True, n=n, what="mCE"), _cell(None, percent=True, n=n, what="relative mCE")]
    sev = sum(len(v) for v in errors.values())
    note = f"over {len(errors)} corruptions, {sev} corruption-severity pairs"
    mce = _cell(mean_corruption_error(errors), percent=True, n=n, what="mCE (lower is better)", digits_note=note)
    rel = (_cell(relative_mean_corruption_error(errors, 1.0 - clean["value"]), percent=True, n=n,
                 what="relative mCE (lower is better)", digits_note=note)
           if clean and clean["value"] is not None else _cell(None, percent=True, n=n, what="relative mCE"))
    return [mce, rel]
