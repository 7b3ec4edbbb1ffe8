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

Pure functions over typed rows (results.records.Row) and tables (no I/O). A :class:`Headline`'s cells are
numbers (:class:`HeadCell`: value, interval, n, the change and its test); text is made only when a table is
written, from each cell's ``text``, ``ci``, ``title`` and ``cls`` (the HTML template, the terminal, the
leaderboard); the leaderboard ranks and finds ties on the numbers.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, NamedTuple, Sequence

from ..condition import Condition, params_key
from ..errors import ShiftbenchError
from ..metrics.robustness import IMAGENET_C_CORRUPTIONS, mean_corruption_error, relative_mean_corruption_error
from ..metrics.uncertainty import (CORRECTIONS, MCNEMAR_TEST, POWER, adjust_p_values, alpha_of, corrected_alpha,
                                   detectable_from_se, detectable_mcnemar)
from ..registry import shift_info
from ..results.records import Row
from ..severity import canonical
from ..severity import label as severity_label
from .failure import FRACTION, BreaksAt, FailureEntry, breaks_at, breaks_at_text, breaks_at_title
from .objectcompose import (ATTACKS, CONTROLS, CUSTOM_FAMILIES, NATURAL_FAMILIES, ROLE_GROUPS, SYNTHETIC_FAMILIES,
                            family_of, role_of)
from .pascal_ea import attribute_value
from .stability import stability
from .stats import BOOTSTRAP_INTERVAL, NOISE_LEVEL
from .tables import CLEAN, Table, fmt

__all__ = ["natural_key", "order_tables", "headline_table", "headline", "imagenet_c_coverage", "NATURAL_FAMILIES",
           "SYNTHETIC_FAMILIES", "CONTROLS", "ATTACKS", "Headline", "HeadCell", "Column", "Detectable",
           "correct_headline", "planned_detectable"]

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
    for name in ("R@10", *preferred):
        if name in by_name:
            return by_name[name]
    return tables[0] if tables else None


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def _n_line(n: int | None) -> str:
    return f"n = {n} samples per condition" if n else "n not recorded"


@dataclass(frozen=True)
class HeadCell:
    """A headline cell as numbers: ``value`` with its 95% CI (``low``, ``high``) and ``n``; against clean its
    change ``delta`` with the change's CI, p-value and noise mark from one named ``test`` (report.stats).
    Writers show it through ``text``, ``ci``, ``title`` and ``cls``; the leaderboard ranks on ``rank_value``."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    n: int | None = None
    delta: float | None = None
    delta_low: float | None = None
    delta_high: float | None = None
    p_value: float | None = None
    noise: bool | None = None
    test: str | None = None
    percent: bool = False  # fractions, shown x100 with one digit (else three digits)
    what: str = ""  # the hover's first part: what the number is
    note: str = ""  # a hover line after n (mCE: over how many corruptions)
    higher_is_better: bool = True
    change: str = "the change"  # what delta_low..delta_high bound (γ@10: the paired change in R@10)
    interval: str | None = None  # which 95% interval low/high is (report.stats: bootstrap or exact Clopper-Pearson)
    se: float | None = None  # the change's bootstrap standard error (what the detectable change rests on)
    discordance: float | None = None  # share of discordant pairs (right/wrong pairs, McNemar)
    p_adjusted: float | None = None  # p adjusted for the headline's family of tests (None: no correction)
    correction: str | None = None  # "Holm over 12 tests", "no correction over 12 tests" (headline's family)
    detectable: float | None = None  # smallest change found with 80% power at n and the corrected alpha

    @classmethod
    def of(cls, stats: dict[str, Any] | None, keep: Sequence[str] = (), **fields: Any) -> HeadCell:
        """``fields``, a report.stats result's numbers (``diff``: the value) over them but for those in ``keep``."""
        known = {("value" if k == "diff" else k): v for k, v in (stats or {}).items() if v is not None}
        return cls(**fields | {k: v for k, v in known.items() if k not in keep})

    @property
    def rank_value(self) -> float | None:
        """The number a ranking orders by: the value, None when there is none or it is not finite."""
        return self.value if self.value is not None and math.isfinite(self.value) else None

    @property
    def shown(self) -> float | None:
        """The value as its text shows it (rounded to the digits shown): the HTML's sort key."""
        v = self.rank_value
        return None if v is None else round(float(100.0 * v if self.percent else v), 1 if self.percent else 3)

    text = property(lambda self: self._parts()[0])
    ci = property(lambda self: self._parts()[1])
    title = property(lambda self: self._parts()[2])
    cls = property(lambda self: self._parts()[3])

    def _interval(self, low: float | None, high: float | None, signed: bool = False) -> str:
        shown = (fmt(low, self.percent, signed), fmt(high, self.percent, signed))
        return f"[{shown[0]}, {shown[1]}]" if low is not None and high is not None else ""

    def _mark(self, text: str) -> str:
        return text + (" ≈" if self.noise else "")

    def _value_ci_line(self, ci: str) -> str:
        shown = "bootstrap" if self.interval in (None, BOOTSTRAP_INTERVAL) else self.interval
        return f"95% {shown} CI of the value {ci}"

    def _adjusted(self) -> str:
        """"; Holm-adjusted p = 0.12 (Holm over 12 tests)", "" without a correction."""
        if self.p_adjusted is None or not self.correction:
            return ""
        return f"; {self.correction.split(' over ')[0]}-adjusted p = {self.p_adjusted:.3g} ({self.correction})"

    def _noise_rule(self) -> str:
        """Which p the ≈ mark reads: the adjusted one under a correction, else the test's own."""
        return (f"{self.correction.split(' over ')[0]}-adjusted p >= 0.05" if self.p_adjusted is not None
                and self.correction else "p >= 0.05" + (f", uncorrected ({self.correction})" if self.correction else ""))

    def _detectable_line(self) -> list[str]:
        if self.detectable is None:
            return []
        size = "none at this n" if math.isinf(self.detectable) else fmt(self.detectable, self.percent)
        return [f"smallest change its test finds with {POWER:.0%} power at this n: {size}"
                + (" points" if self.percent and not math.isinf(self.detectable) else "")]

    def _parts(self) -> tuple[str, str, str, str]:
        """(text, ci, title, cls): "value (change)", the CI line, the hover with n and the test, the colour."""
        test, ci = self.test or "paired test", self._interval(self.low, self.high)
        lines = [self.what, _n_line(self.n)] + ([self.note] if self.note else [])
        lines += [self._value_ci_line(ci)] if ci else []
        if self.delta_low is not None and self.delta_high is not None:
            lines.append(f"95% CI of {self.change} {self._interval(self.delta_low, self.delta_high, True)} ({test})")
        lines += ([f"p = {self.p_value:.3g} ({test}, against clean){self._adjusted()}"]
                  if self.p_value is not None else [])
        lines += [f"≈: within noise, {self._noise_rule()} ({test})"] if self.noise else []
        lines += self._detectable_line()
        change = f" ({fmt(self.delta, self.percent, True)})" if self.delta is not None else ""
        cls = ("noise" if self.noise else "" if self.delta is None or self.delta == 0
               else "down" if (self.delta < 0) == self.higher_is_better else "up")
        return self._mark(fmt(self.value, self.percent) + change), ci, "; ".join(lines), cls


@dataclass(frozen=True)
class GapCell(HeadCell):
    """The BG-Gap of a model, Mixed-Same minus Mixed-Rand (``same``, ``rand``: their means), signed, with the
    paired 95% CI of the gap in ``low``/``high``."""

    same: float | None = None
    rand: float | None = None

    def _parts(self) -> tuple[str, str, str, str]:
        if self.value is None:
            return "–", "", "", ""
        test = self.test or "paired test"
        ci = self._interval(self.low, self.high, signed=True) if self.low is not None else ""
        lines = [f"BG-Gap = Mixed-Same {fmt(self.same, self.percent)} - Mixed-Rand {fmt(self.rand, self.percent)}"
                 + (" points" if self.percent else ""), _n_line(self.n)]
        if self.low is not None:
            lines.append(f"95% CI {ci} ({test})")
            if self.p_value is not None:
                lines.append(f"p = {self.p_value:.3g} ({test}, Mixed-Same against Mixed-Rand){self._adjusted()}")
        lines += [f"≈: the gap is within noise, {self._noise_rule()} ({test})"] if self.noise else []
        lines += self._detectable_line()
        cls = "noise" if self.noise else "down" if self.value > 0 else "up" if self.value < 0 else ""
        return self._mark(fmt(self.value, self.percent, True)), ci, "; ".join(lines), cls


@dataclass(frozen=True)
class PairCell(HeadCell):
    """One model minus the run's first on the same samples (``what``: who minus whom, under which column)."""

    def _parts(self) -> tuple[str, str, str, str]:
        if self.value is None:
            return "–", "", "", ""
        ci, p = self._interval(self.low, self.high, signed=True), self.p_value
        title = (f"{self.what}: paired over n = {self.n} samples" + (f"; 95% CI {ci}" if ci else "")
                 + (f", p = {p:.3g}" if p is not None else "") + f" ({self.test or 'paired test'})" + self._adjusted()
                 + (f"; ≈ within noise, {self._noise_rule()}" if self.noise else "")
                 + "".join(f"; {line}" for line in self._detectable_line()))
        cls = "noise" if self.noise else "up" if self.value > 0 else "down" if self.value < 0 else ""
        return self._mark(fmt(self.value, self.percent, True)), ci, title, cls


@dataclass(frozen=True)
class BreaksCell(HeadCell):
    """A model's "breaks at" (report.failure.breaks_at): the earliest failure severity over the corruptions and
    its 95% CI; ``value`` inf (CI from the last measured severity to inf) when no curve gets there."""

    found: BreaksAt | None = field(default=None, compare=False)

    @classmethod
    def at(cls, failures: Sequence[FailureEntry], model: str, metric: str) -> BreaksCell:
        found = breaks_at(failures, model)
        if found is None:
            return cls(what=metric)
        point = found.entry.point
        if not found.crossed:  # never within the measured severities: somewhere beyond the last one
            return cls(math.inf, float(found.severities[-1]), math.inf, point.n, what=metric, found=found)
        return cls(point.severity, float(point.low), float(point.high), point.n, what=metric, found=found)

    rank_value = property(lambda self: self.value)
    shown = property(lambda self: None if self.value is None else round(float(self.value), 1))

    def _parts(self) -> tuple[str, str, str, str]:
        crossed = self.value is not None and math.isfinite(self.value)
        return breaks_at_text(self.found), "", breaks_at_title(self.found, self.what), "down" if crossed else ""


Column = NamedTuple("Column", [("group", str), ("head", str), ("title", str)])
# a headline column's smallest detectable change, as shown under the models: its text and hover
Detectable = NamedTuple("Detectable", [("text", str), ("title", str)])
HeadRow = NamedTuple("HeadRow", [("model", str), ("n", "int | None"), ("cells", "list[HeadCell]")])
PairRow = NamedTuple("PairRow", [("label", str), ("cells", "list[HeadCell]")])  # label: ``b − a``
# each model against the run's first on the same samples: one row per model, one cell per column
Pairs = NamedTuple("Pairs", [("base", str), ("heads", "list[str]"), ("rows", "list[PairRow]"), ("note", str)])
Coverage = NamedTuple("Coverage", [("full", bool), ("corruptions", "list[str]"), ("severities", list)])
# a headline column after clean: the group above it, its key (``corruptions``, ``family:mixed_same``, ``bg_gap``,
# ...), its head and the metric's rows it is computed from
_Group = NamedTuple("_Group", [("label", str), ("key", str), ("head", str), ("rows", list)])


@dataclass
class Headline:
    """The headline of one run: ``groups`` ([(label, span)] over ``columns``), one row per model."""

    metric: str
    groups: list[tuple[str, int]]
    columns: list[Column]
    rows: list[HeadRow]
    note: str
    pairs: Pairs | None = None
    detectable: list[Detectable] | None = None  # per column: the smallest change its tests find (None: no tests)
    correction: str = "holm"  # the multiplicity correction of the family of its tests (CORRECTIONS)


def _conditions(rows: Sequence[Row]) -> list[Condition]:
    seen: dict[tuple, Condition] = {}
    for r in rows:  # 2.5 is its own condition, never merged into 2
        key = (r.shift, params_key(r.params), canonical(r.severity))
        seen.setdefault(key, Condition("", "", r.shift, dict(r.params or {}), key[2]))
    return list(seen.values())


def _protocol_rows(rows: Sequence[Row]) -> list[Row]:
    """The rows at ImageNet-C's whole severities 1-5 (what its published protocol averages)."""
    return [r for r in rows if canonical(r.severity) in SEVERITIES_C]


def _mine(rows: Sequence[Row], model: str) -> list[Row]:
    return [r for r in rows if r.model == model]


def _plural(k: int, what: str) -> str:
    return f"mean of {k} {what}{'s' if k != 1 else ''}"


def _groups(rows: Sequence[Row], metric: str) -> list[_Group]:
    """The headline's columns after clean (label, key, head, the metric's rows of the column), in display order."""
    mrows = [r for r in rows if r.metric == metric and r.shift != CLEAN]
    out: list[_Group] = []
    corr = [r for r in mrows if r.shift in IMAGENET_C_CORRUPTIONS]
    corr_ids = {id(r) for r in corr}  # all of them ImageNet-C's, also the fractional rows its mean leaves out
    if corr:
        # "ImageNet-C" only for the whole protocol; a few of its corruptions are "corruptions"; the protocol's mean
        # is over its severities 1-5: a finer grid's fractional rows stay out of it (they are in the per-severity
        # tables, the curves and the failure points)
        full = imagenet_c_coverage(rows, metric).full
        out.append(_Group("ImageNet-C" if full else "corruptions", "corruptions",
                          _plural(len({r.shift for r in corr}), "corruption"), _protocol_rows(corr) if full else corr))
    cbar = [r for r in mrows if shift_info(r.shift).family == "cbar"]  # C-bar's corruptions: a column of their own
    if cbar:
        out.append(_Group("ImageNet-C-bar", "cbar", _plural(len({r.shift for r in cbar}), "C-bar corruption"), cbar))
    families: dict[str, list[Row]] = {}
    for r in mrows:
        fam = family_of(r.shift, r.params)
        if fam is not None:
            families.setdefault(fam, []).append(r)
    for fam in _FAMILY_COLUMNS:  # grouped by what they are: natural scenes, synthetic backgrounds, ...
        if fam in families:
            group = ROLE_GROUPS[role_of(fam)]
            out.append(_Group(group, f"family:{fam}", fam, families[fam]))
            if fam == "mixed_rand" and "mixed_same" in families:
                out.append(_Group(group, "bg_gap", "BG-Gap", []))  # Mixed-Same minus Mixed-Rand, per model
    attributes: dict[str, list[Row]] = {}
    for r in mrows:
        if attribute_value(r.shift, r.params or {}) is not None:
            attributes.setdefault(r.shift[len("attribute_"):], []).append(r)
    for fam in ("color", "material", "pattern", "style"):
        if fam in attributes:
            out.append(_Group("attribute edits", f"attribute:{fam}", fam, attributes.pop(fam)))
    # text corruptions (composed retrieval) in a column of their own; whatever no family claims still gets a
    # column, so no shift of the run is missing from the headline
    for label, key, what, text in (("text corruptions", "text", "text shift", True),
                                   ("other shifts", "other", "other shift", False)):
        claimed = {id(r) for g in out for r in g.rows} | corr_ids
        found = [r for r in mrows if id(r) not in claimed and (_text_shift(r.shift) or not text)]
        if found:
            out.append(_Group(label, key, _plural(len({(r.shift, params_key(r.params)) for r in found}), what), found))
    return out


def _gap_cell(model: str, metric: str, pct: bool, groups: Sequence[_Group], unc: Any) -> GapCell:
    """The BG-Gap cell of one model: Mixed-Same minus Mixed-Rand (means over their conditions), signed, with
    its paired 95% bootstrap CI when the store has per-sample values."""
    same, rand = ([r for g in groups if g.key == key for r in _mine(g.rows, model)]
                  for key in ("family:mixed_same", "family:mixed_rand"))
    vs, vr = _mean(r.value for r in same), _mean(r.value for r in rand)
    if vs is None or vr is None:
        return GapCell()
    res = unc.contrast([model], metric, _conditions(same), _conditions(rand)) if unc is not None else None
    return GapCell.of(res, keep=("value", "n"), value=vs - vr, same=vs, rand=vr, n=same[0].n, percent=pct)


def _text_shift(name: str) -> bool:
    return shift_info(name).role == "text"


def headline(rows: Sequence[Row], tables: Sequence[Table], preferred: Sequence[str], unc: Any = None,
             baseline: str = CLEAN, failures: Sequence[FailureEntry] | None = None,
             correction: str = "holm") -> Headline | None:
    """The headline of one run (:class:`Headline`); columns that do not apply to the run are left out.
    ``baseline``: what the unshifted condition is called, ``clean`` unless the run read a folder written by
    generate (then the shift and severity it was made under, report/build.py). ``failures``: the run's
    failure points of the headline metric (``report.failure.failure_entries``); with a corruption curve
    among them, a last column "breaks at" gives each model's earliest point over the corruptions.
    ``correction``: how the family of its paired tests is corrected for multiplicity (:func:`correct_headline`)."""
    if correction not in CORRECTIONS:
        raise ShiftbenchError(f"unknown multiplicity correction {correction!r}; expected one of {', '.join(CORRECTIONS)}")
    main = headline_table(tables, preferred)
    if main is None:
        return None
    metric, pct = main.metric, main.percent
    unit = " (%)" if pct else ""
    groups = _groups(rows, metric)
    # mCE is defined on top-1 errors over the whole protocol: shown for runs that measured top1 under all 15
    # corruptions at severities 1-5 (their own parameters), whatever the headline metric; never from a part
    coverage = imagenet_c_coverage(rows, "top1")
    corr_top1 = [r for r in _protocol_rows(rows) if r.metric == "top1" and r.shift in IMAGENET_C_CORRUPTIONS
                 and not r.params] if coverage.full else []
    gamma_sets = _gamma_sets(rows)
    columns = _columns(main, groups, bool(corr_top1), gamma_sets)
    cue_controls = _cue_controls(rows, metric)
    columns += [Column(group, head, title) for _, group, head, title in cue_controls]
    stable = {e.model: e for e in stability(rows, unc)}  # ImageNet-P's mFR and mT5D (report/stability.py)
    if stable:
        columns += _STABILITY_COLUMNS
    # "breaks at": for a higher-is-better metric with a corruption curve
    breaks = bool(failures) and main.higher_is_better and any(breaks_at(failures, m) is not None for m in main.models)
    if breaks:
        columns.append(Column("failure point", "breaks at",
                              f"the earliest severity (1..5), over the run's corruptions, at which {metric} falls "
                              f"to {FRACTION:g} x clean (linear between measured severities, fractional ones "
                              "included), and the corruption; never: no corruption curve gets there; C-bar's "
                              "level-scale (0..10) curves are not severities: Failure points ranks them apart"))
    # the first column is what the run read unshifted, which is not clean for a folder written by generate
    first = f"clean {metric}" if baseline == CLEAN else f"{metric} on {baseline}"
    out_rows = []
    for model in main.models:
        clean_cell = main.cells.get((CLEAN, model))
        cells = _family_cells(model, main, groups, unc, first)
        if corr_top1:
            cells += _mce_cells(model, corr_top1, rows)
        cells += [_gamma_cell(model, label, sel, unc) for label, sel in gamma_sets]
        cells += [_cue_cell(model, key, head, rows, unc) for key, _, head, _ in cue_controls]
        if stable:
            cells += _stability_cells(stable.get(model))
        if breaks:
            cells.append(BreaksCell.at(failures or [], model, metric))
        out_rows.append(HeadRow(model, clean_cell.n if clean_cell else None, cells))
    if baseline != CLEAN:
        columns[0] = Column(baseline, columns[0].head, f"{metric}{unit} on the data as read: {baseline}")
    columns, spans = _keep_groups_together(columns, out_rows)
    ci = (" Second line: 95% CI of the value (percentile bootstrap; for a proportion under one condition the exact "
          "Clopper-Pearson interval, named on hover); ≈ marks a change within noise in its paired test (hover a "
          "cell for the test, its p and its CI of the change)." if unc is not None
          else " No per-sample values in this store: no confidence intervals.")
    note = (f"One line per model. Each cell: {metric}{unit} and, in brackets, its change against clean "
            f"(shifted minus clean: negative is worse for a higher-is-better metric), mean over the column's "
            f"conditions and severities; n = samples per condition (hover a cell for details).{ci}"
            + _mce_note(coverage) + (_BREAKS_NOTE if breaks else "") + (_CUE_NOTE if cue_controls else "")
            + (_STABILITY_NOTE if stable else ""))
    head = Headline(metric, spans, columns, out_rows, note, _pairs(main.models, metric, pct, rows, groups, unc),
                    correction=correction)
    return correct_headline(head, correction) if unc is not None else head


_STABILITY_COLUMNS = [
    Column("stability (ImageNet-P)", "mFR", "mean flip rate over the run's ImageNet-P perturbation sequences at "
           "difficulty 1: 100 x the flip probability / AlexNet's, averaged (lower is more stable; AlexNet = 100)"),
    Column("stability (ImageNet-P)", "mT5D", "mean top-5 distance over the run's ImageNet-P perturbation sequences "
           "at difficulty 1: 100 x the top-5 distance / AlexNet's, averaged (lower is more stable; AlexNet = 100)")]
_STABILITY_NOTE = (" mFR, mT5D (Hendrycks and Dietterich, ICLR 2019): how often the prediction flips, and how far "
                   "its top 5 moves, along ImageNet-P's perturbation sequences, each perturbation normalised by "
                   "AlexNet's published figure (= 100); over all ten perturbations these are the published mFR and "
                   "mT5D, over fewer the mean of those the run has (hover; every perturbation in Stability).")


def _stability_cells(entry: Any) -> list[HeadCell]:
    """A model's mFR and mT5D cells (shown as x / 100 percentages: 58.0 reads as 58.0)."""
    out = []
    for what, stat in (("mFR", None if entry is None else entry.mfr), ("mT5D", None if entry is None else entry.mt5d)):
        if stat is None or stat.value is None:
            out.append(HeadCell(percent=True, what=what, higher_is_better=False))
            continue
        scale = (lambda v: None if v is None else v / 100.0)
        covered = entry.covered
        note = ("over all 10 ImageNet-P perturbations (the published protocol)" if len(covered) == 10 else
                f"over {len(covered)} of ImageNet-P's 10 perturbations: {', '.join(covered)}")
        out.append(HeadCell(scale(stat.value), scale(stat.low), scale(stat.high), n=stat.n, percent=True,
                            what=f"{what} (lower is more stable; AlexNet = 100), sequences per perturbation",
                            note=note, higher_is_better=False))
    return out


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


def _cue_controls(rows: Sequence[Row], metric: str) -> list[tuple[str, str, str, str]]:
    """The controls' columns of a shape-bias headline: those of ``_CUE_COLUMNS`` the run's clean rows have."""
    if metric != "shape_bias":
        return []
    have = {r.metric for r in rows if r.shift == CLEAN}
    return [c for c in _CUE_COLUMNS if c[0] in have]


def _cue_cell(model: str, key: str, head: str, rows: Sequence[Row], unc: Any) -> HeadCell:
    """A model's clean value of one control row of shape_bias, with its 95% bootstrap CI over images."""
    mine = [r for r in rows if r.model == model and r.metric == key and r.shift == CLEAN]
    stats = (unc.aggregate(model, key, _conditions(mine), against_clean=False)
             if unc is not None and mine and unc.has(model, key) else None)
    return HeadCell.of(stats, value=_mean(r.value for r in mine), percent=True, n=mine[0].n if mine else None,
                       what=f"{head} on clean")


def _gamma_sets(rows: Sequence[Row]) -> list[tuple[str, list[Row]]]:
    """The γ@10 rows of a composed retrieval run, as (label, rows): image shifts at severity 5, text shifts at
    severity 3; none for other runs."""
    g = [r for r in rows if r.metric == "gamma@10" and r.shift != CLEAN]
    image = [r for r in g if not _text_shift(r.shift) and canonical(r.severity) == 5]
    text = [r for r in g if _text_shift(r.shift) and canonical(r.severity) == 3]
    return [(label, sel) for label, sel in (("image shifts, severity 5", image), ("text shifts, severity 3", text))
            if sel]


def _columns(main: Table, groups: Sequence[_Group], mce: bool,
             gamma_sets: Sequence[tuple[str, list[Row]]]) -> list[Column]:
    """The headline's columns, in the order of a row's cells: clean, each group, mCE, γ@10."""
    metric, hib = main.metric, main.higher_is_better
    unit = " (%)" if main.percent else ""
    columns = [Column("clean", f"{metric}{unit}", f"clean {metric}{unit}, {'higher' if hib else 'lower'} is better")]
    for g in groups:
        if g.key == "bg_gap":
            columns.append(Column(g.label, g.head, f"BG-Gap: {metric}{unit} on Mixed-Same minus Mixed-Rand, in "
                                  "points (Xiao et al., Noise or Signal, ICLR 2021); positive = the model relies on a "
                                  "fitting background"))
            continue
        k = len(_conditions(_mine(g.rows, g.rows[0].model)))
        which = "ImageNet-C's severities 1-5" if g.label == "ImageNet-C" else "all severities run"
        columns.append(Column(g.label, g.head, f"{metric}{unit}: mean over {k} condition(s) of {g.head} ({which}), "
                                               "and its change against clean (shifted minus clean)"))
    if mce:
        note = ("AlexNet-normalised with ImageNet-C's published AlexNet errors; errors = 1 − top1; "
                "lower is better (100 = AlexNet)")
        columns.append(Column("ImageNet-C", "mCE", "mean corruption error (%), " + note))
        columns.append(Column("ImageNet-C", "rel. mCE",
                              "relative mean corruption error (%): error added by the corruptions, " + note))
    for label, _ in gamma_sets:
        columns.append(Column("composed retrieval", f"γ@10 {label}",
                              f"mean relative robustness γ@10 = R@10 shifted / R@10 clean over {label}; "
                              "1 = no loss, above 1 = the shift helped"))
    return columns


def _family_cells(model: str, main: Table, groups: Sequence[_Group], unc: Any, first: str) -> list[HeadCell]:
    """A model's clean cell (``first``: what its hover calls it) and its cell for each group: the mean over the
    group's conditions and its change against clean, or the BG-Gap."""
    metric, pct, hib = main.metric, main.percent, main.higher_is_better
    clean_cell = main.cells.get((CLEAN, model))
    clean = clean_cell.value if clean_cell else None
    cells = [HeadCell(clean, *((clean_cell.low, clean_cell.high, clean_cell.n) if clean_cell else ()),
                      percent=pct, what=first, interval=clean_cell.interval if clean_cell else None)]
    has = unc is not None and unc.has(model, metric)
    for g in groups:
        if g.key == "bg_gap":
            cells.append(_gap_cell(model, metric, pct, groups, unc if has else None))
            continue
        mine = _mine(g.rows, model)
        value = _mean(r.value for r in mine)
        agg = unc.aggregate(model, metric, _conditions(mine)) if has and mine else None
        cells.append(HeadCell.of(agg, value=value, delta=None if value is None or clean is None else value - clean,
                                 n=mine[0].n if mine else None, percent=pct, higher_is_better=hib,
                                 what=f"{metric} under {g.head}, mean over {len(mine)} condition(s); change = shifted "
                                      "minus clean"))
    return cells


def _gamma_cell(model: str, label: str, sel: Sequence[Row], unc: Any) -> HeadCell:
    """A model's mean γ@10 over one set of conditions; its noise mark and test come from the paired change in R@10
    (gamma = 1 + change / clean)."""
    mine = _mine(sel, model)
    has = unc is not None and unc.has(model, "R@10")
    agg = unc.aggregate(model, "R@10", _conditions(mine)) if has and mine else None
    return HeadCell.of(agg, keep=("value", "low", "high", "delta"), value=_mean(r.value for r in mine),
                       n=mine[0].n if mine else None, what=f"mean γ@10 over {len(mine)} {label}",
                       change="the change in R@10 (fraction)")


def _keep_groups_together(columns: list[Column], out_rows: list[HeadRow]) -> tuple[list[Column], list[tuple]]:
    """Reorder the columns (and every row's cells alike) so that each group's columns are together, groups in
    order of first appearance (mCE joins the ImageNet-C mean); returns the columns and the (group, span) list."""
    first: dict[str, int] = {}
    for i, c in enumerate(columns):
        first.setdefault(c.group, i)
    perm = sorted(range(len(columns)), key=lambda i: (first[columns[i].group], i))
    columns = [columns[i] for i in perm]
    for r in out_rows:
        r.cells[:] = [r.cells[i] for i in perm]
    return columns, [(group, len(list(run))) for group, run in itertools.groupby(c.group for c in columns)]


def _pairs(models: Sequence[str], metric: str, pct: bool, rows: Sequence[Row], groups: Sequence[_Group],
           unc: Any) -> Pairs | None:
    """Each model against the run's first model on the same samples (paired): the difference on clean and on
    each headline column, its 95% CI and p-value from one test (exact McNemar for top-1/top-5 on one
    condition, else the paired bootstrap), ≈ where that p >= 0.05 (the CI then contains 0). None without
    per-sample values or with one model."""
    if unc is None or len(models) < 2 or not all(unc.has(m, metric) for m in models):
        return None
    base = models[0]
    clean = _conditions([r for r in _mine(rows, base) if r.metric == metric and r.shift == CLEAN])[:1]
    cols = [("clean", clean)] + [(g.head, _conditions(_mine(g.rows, base))) for g in groups]
    cols = [(head, conds) for head, conds in cols if conds]
    out = [PairRow(f"{model} − {base}",
                   [PairCell.of(unc.compare(base, model, metric, conds), percent=pct,
                                what=f"{model} minus {base}, {metric} under {head}") for head, conds in cols])
           for model in models[1:]]
    return Pairs(base, [h for h, _ in cols], out,
                 f"Each model minus {base} on the same samples (paired), {metric}{' in points' if pct else ''}: "
                 "the difference, its 95% CI (second line) and p-value (hover), from one test (exact McNemar for "
                 "top-1/top-5 on one condition, else the paired bootstrap); ≈ = within noise, p >= 0.05.")


def imagenet_c_coverage(rows: Sequence[Row], metric: str = "top1") -> Coverage:
    """How much of the ImageNet-C protocol a run's ``metric`` rows cover: ``full`` when every model with the
    metric has all 15 corruptions at severities 1-5, each with the corruption's own parameters (no ``params``),
    the only case in which mCE and relative mCE are defined; ``corruptions`` / ``severities``: those of the
    rows, whatever their parameters.

    >>> from shiftbench.results.records import Row
    >>> rows = [Row(model="m", dataset="d", metric="top1", shift=c, params={}, severity=s, value=0.5)
    ...         for c in ("gaussian_noise", "fog", "snow") for s in (3, 5)]
    >>> imagenet_c_coverage(rows)
    Coverage(full=False, corruptions=['fog', 'gaussian_noise', 'snow'], severities=[3, 5])
    """
    mine = [r for r in rows if r.metric == metric]
    corr = [r for r in mine if r.shift in IMAGENET_C_CORRUPTIONS]
    protocol = {(c, s) for c in IMAGENET_C_CORRUPTIONS for s in SEVERITIES_C}
    have: dict[str, set[tuple[str, int]]] = {r.model: set() for r in mine}
    for r in corr:
        if not r.params and r.value is not None:
            have[r.model].add((r.shift, canonical(r.severity)))
    full = bool(have) and all(protocol <= got for got in have.values())
    return Coverage(full, sorted({r.shift for r in corr}), sorted({canonical(r.severity) for r in corr}))


def _mce_note(coverage: Coverage) -> str:
    """One sentence on why a top-1 run with some corruptions shows no mCE ("" when it shows one, or has none)."""
    k, sev = len(coverage.corruptions), coverage.severities
    if coverage.full or not k:
        return ""
    where = f" at severit{'y' if len(sev) == 1 else 'ies'} {', '.join(map(severity_label, sev))}"
    return (f" No mCE or relative mCE: they are defined over all {len(IMAGENET_C_CORRUPTIONS)} ImageNet-C "
            f"corruptions at severities 1-5 (top-1, the corruptions' own parameters); this run has {k} of "
            f"{len(IMAGENET_C_CORRUPTIONS)}{where}, so the headline shows their mean (mean of {k} "
            f"corruption{'s' if k != 1 else ''}).")


def _mce_cells(model: str, corr: Sequence[Row], rows: Sequence[Row]) -> list[HeadCell]:
    errors: dict[str, list[float]] = {}
    # the protocol's five whole severities only, in order (a finer grid's 1.5, 2.5, ... never enter mCE)
    for r in sorted((r for r in _protocol_rows(corr) if r.model == model and r.value is not None),
                    key=lambda r: (r.shift, canonical(r.severity))):
        errors.setdefault(r.shift, []).append(1.0 - r.value)
    clean = next((r for r in rows if r.model == model and r.shift == CLEAN and r.metric == "top1"), None)
    n = clean.n if clean else None
    note = f"over {len(errors)} corruptions, {sum(len(v) for v in errors.values())} corruption-severity pairs"
    mce = HeadCell(mean_corruption_error(errors) if errors else None, n=n, percent=True, note=note if errors else "",
                   what="mCE (lower is better)" if errors else "mCE")
    rel = (HeadCell(relative_mean_corruption_error(errors, 1.0 - clean.value), n=n, percent=True, note=note,
                    what="relative mCE (lower is better)") if errors and clean and clean.value is not None
           else HeadCell(n=n, percent=True, what="relative mCE"))
    return [mce, rel]


# -- multiplicity and the smallest detectable change (issue 39) ---------------------------------------------------

_CORRECTION_NOTES = {
    "holm": "Holm's step-down correction (controls the chance of any false 'changed' among them at 5%)",
    "bh": "the Benjamini-Hochberg correction (controls the expected share of false 'changed' among those "
          "found at 5%)",
    "none": "no multiplicity correction (--correction none: each test at 5% on its own)"}


def correct_headline(head: Headline, method: str = "holm") -> Headline:
    """Correct the headline's paired tests for multiplicity and give each its smallest detectable change.

    The family is every test the headline shows (each column's change against clean per model, the BG-Gap,
    each model against the first): their p-values are adjusted together (``adjust_p_values``: Holm, Benjamini-
    Hochberg or none); each cell keeps its raw ``p_value``, gets ``p_adjusted`` and ``correction``, and ≈ follows
    p_adjusted >= 0.05 (the raw p without a correction). Each tested cell also gets ``detectable``: the change its
    test finds with 80% power at its n and the most stringent corrected alpha, 0.05 / m (McNemar's normal
    approximation on the observed discordance for right/wrong pairs, else (z + z) x the bootstrap standard error);
    ``head.detectable`` gives each column's range over the models. Cells are replaced, ``head`` returned."""
    alpha = alpha_of(NOISE_LEVEL)
    grids = [r.cells for r in head.rows] + ([r.cells for r in head.pairs.rows] if head.pairs else [])
    where = [(cells, i) for cells in grids for i, c in enumerate(cells) if c.p_value is not None]
    m = len(where)
    if not m:
        head.correction = method
        return head
    adjusted = adjust_p_values([cells[i].p_value for cells, i in where], method)
    alpha_m = corrected_alpha(alpha, m, method)
    label = f"{CORRECTIONS[method] if method != 'none' else 'no correction'} over {m} test{'s' if m != 1 else ''}"
    for (cells, i), p_adj in zip(where, adjusted):
        c = cells[i]
        noise = bool(p_adj >= alpha) if method != "none" else c.noise
        cells[i] = replace(c, p_adjusted=None if method == "none" else float(p_adj), noise=noise, correction=label,
                           detectable=_detectable(c, alpha_m))
    head.correction = method
    head.detectable = _detectable_row(head, alpha_m, label)
    if head.pairs and method != "none":
        head.pairs = head.pairs._replace(note=head.pairs.note.replace(
            "≈ = within noise, p >= 0.05.", f"≈ = within noise, {CORRECTIONS[method]}-adjusted p >= 0.05 (the "
            f"headline's family of {m} tests; the CI is the test's own 95% interval)."))
    head.note += (f" Multiplicity: the {m} paired tests of this headline (each column's change against clean per "
                  f"model{', the BG-Gap' if any(isinstance(c, GapCell) for r in head.rows for c in r.cells) else ''}"
                  f"{', each model against the first' if head.pairs else ''}) are one family, under "
                  f"{_CORRECTION_NOTES[method]}; ≈ follows the {'adjusted' if method != 'none' else 'raw'} p (hover: "
                  f"raw and adjusted p), while each CI stays the test's own 95% interval. Detectable: the "
                  f"smallest change each column's test finds with {POWER:.0%} power at the run's n, two-sided at "
                  f"alpha = 0.05 / {m} (the correction's strictest step), the range over the models; a change "
                  "within noise that is smaller than it may be a real one the run has too few images to see.")
    return head


def _detectable(cell: HeadCell, alpha: float) -> float | None:
    """A tested cell's smallest detectable change at ``alpha``: McNemar's (normal approximation) from its
    discordance when its test is McNemar's, else from its standard error; None without either."""
    if cell.change != HeadCell.change:
        return None  # γ@10: its test is on R@10, in other units than the column shows
    if cell.discordance is not None and cell.test == MCNEMAR_TEST and cell.n:
        return detectable_mcnemar(int(cell.n), cell.discordance, alpha)
    if cell.se is not None and math.isfinite(cell.se) and cell.se > 0:
        return detectable_from_se(cell.se, alpha)
    return None  # no spread seen (every pair equal): the data give no standard error to size a change by


def _detectable_row(head: Headline, alpha: float, label: str) -> list[Detectable]:
    """Per headline column: the range over the models of their cells' smallest detectable changes, and its hover
    (each model's, with what it rests on); "–" where no cell of the column is tested."""
    out = []
    for j, column in enumerate(head.columns):
        found = [(r.model, r.cells[j]) for r in head.rows if j < len(r.cells) and r.cells[j].detectable is not None]
        if not found:
            out.append(Detectable("–", ""))
            continue
        pct = found[0][1].percent
        values = [c.detectable for _, c in found]
        lo, hi = min(values), max(values)

        def show(v: float) -> str:
            return "∞" if math.isinf(v) else fmt(v, pct)

        text = "±" + (show(lo) if show(lo) == show(hi) else f"{show(lo)}–{show(hi)}")
        each = "; ".join(f"{model}: ±{show(c.detectable)}" + (
            f" (McNemar, {c.discordance:.1%} of pairs discordant, n = {c.n})" if c.test == MCNEMAR_TEST
            and c.discordance is not None else " (from the bootstrap standard error)") for model, c in found)
        out.append(Detectable(text, f"{column.head}: smallest change of the column's test"
                              f"{' (points)' if pct else ''} found with {POWER:.0%} power, two-sided at alpha = "
                              f"{alpha:.3g} ({label}); {each}"))
    return out


PLANNED_DISCORDANCE = (0.1, 0.2, 0.3)  # shares of images changing between right and wrong, assumed before a run


def planned_detectable(n: int, models: int, shifts: int, metrics: Sequence[str], correction: str = "holm") -> str:
    """What a planned run of n images can see, for ``shiftbench evaluate --dry-run`` (no data yet, so stated under
    assumptions): the headline's family is at most m = models x shifts changes against clean plus (models - 1) x
    (shifts + 1) model comparisons, tested two-sided at 0.05 / m; top-1/top-5 (McNemar) at 10%, 20% and 30% of
    images discordant, any other metric as a multiple of the SD of its paired per-image differences.

    >>> planned_detectable(1000, 1, 1, ["top1"], "none")
    'smallest detectable change at n = 1000 (80% power, two-sided at alpha = 0.05): top1: ±2.8 / 4.0 / 4.8 points if 10% / 20% / 30% of the images change between right and wrong (McNemar)'
    """
    if correction not in CORRECTIONS:
        raise ShiftbenchError(f"unknown multiplicity correction {correction!r}; expected one of {', '.join(CORRECTIONS)}")
    m = max(1, models * shifts + (models - 1) * (shifts + 1))
    alpha = corrected_alpha(alpha_of(NOISE_LEVEL), m, correction)
    family = ("" if correction == "none" or m == 1 else
              f" = 0.05 / {m}: {CORRECTIONS[correction]}'s strictest step over at most {m} headline tests")
    parts = []
    binary = [x for x in metrics if x in ("top1", "top5")]
    if binary:
        sizes = " / ".join(f"{100 * detectable_mcnemar(n, psi, alpha):.1f}" for psi in PLANNED_DISCORDANCE)
        shares = " / ".join(f"{psi:.0%}" for psi in PLANNED_DISCORDANCE)
        parts.append(f"{', '.join(binary)}: ±{sizes} points if {shares} of the images change between right and wrong "
                     "(McNemar)")
    others = [x for x in metrics if x not in ("top1", "top5")]
    if others or not parts:
        per_sd = detectable_from_se(1.0 / math.sqrt(n), alpha)
        parts.append(f"{', '.join(others) if others else 'a metric'}: ±{per_sd:.3g} x the SD of its paired per-image "
                     "differences")
    return (f"smallest detectable change at n = {n} ({POWER:.0%} power, two-sided at alpha = "
            f"{alpha:.3g}{family}): " + "; ".join(parts))
