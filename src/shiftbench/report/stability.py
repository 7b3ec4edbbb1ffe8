"""Stability under perturbation sequences (ImageNet-P) in the report: per model and perturbation the flip
probability FP and the top-5 distance T5D with their intervals over sequences, FR and T5D normalised by
AlexNet's published figures, and the means mFR and mT5D over the benchmark's ten perturbations.

The rows are the store's ``flip_prob`` and ``t5d`` rows (metrics/stability.py). mFR and mT5D follow the
published definition: the mean over the ten ImageNet-P perturbations at difficulty 1 of 100 x the model's
FP (T5D) / AlexNet's; a run with only some of the ten gets the mean over those it has, named "over k of 10"
(never compared with the published figures, which need all ten). The validation extras (speckle noise,
gaussian blur, spatter, shear) and the difficulties 2 and 3 are shown with their own FR and T5D, outside
the means. Intervals: the value's 95% interval over sequences from report.stats (the sample unit is the
sequence); an FR is a fixed multiple of FP, so its interval is the same multiple of FP's, and mFR's interval
resamples the sequences jointly across the perturbations (one draw of ids for all of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..condition import Condition
from ..metrics.stability import ALEXNET_FP, ALEXNET_T5D, STABILITY_METRICS
from ..results.records import Row
from ..shifts.perturbations import IMAGENET_P, IMAGENET_P_EXTRA

__all__ = ["Stat", "PerturbationStability", "ModelStability", "stability", "stability_blocks", "has_stability",
           "NORMALISER_SOURCE"]

NORMALISER_SOURCE = ("AlexNet's flip probabilities and top-5 distances published with ImageNet-P (Hendrycks and "
                     "Dietterich, ICLR 2019, appendix)")


@dataclass(frozen=True)
class Stat:
    """A number with its 95% interval (None where there is none) and the sequences behind it."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int | None = None

    def scaled(self, factor: float) -> "Stat":
        f = (lambda v: None if v is None else factor * v)
        return Stat(f(self.value), f(self.low), f(self.high), self.n)


@dataclass(frozen=True)
class PerturbationStability:
    """One model under one perturbation sequence at one difficulty."""

    shift: str
    difficulty: int
    params: dict[str, Any]  # the shift's parameters (a crop); the means take the parameter-free ones
    fp: Stat  # a fraction
    t5d: Stat
    fr: Stat | None  # 100 x FP / AlexNet's FP (None: AlexNet has no figure)
    t5d_norm: Stat | None


@dataclass(frozen=True)
class ModelStability:
    """One model's stability: every perturbation it was run on, and the means over the benchmark's ten."""

    model: str
    perturbations: list[PerturbationStability]
    mfr: Stat | None
    mt5d: Stat | None
    covered: list[str]  # the ten's perturbations (difficulty 1) in the means

    @property
    def full(self) -> bool:
        return len(self.covered) == len(IMAGENET_P)


def has_stability(rows: Sequence[Row]) -> bool:
    return any(r.metric in STABILITY_METRICS for r in rows)


def _cond(r: Row) -> Condition:
    return Condition("", "", r.shift, dict(r.params or {}), r.severity)


def _stat(rows: dict, key: tuple, model: str, metric: str, unc: Any) -> Stat:
    row = rows.get(key)
    if row is None:
        return Stat(None)
    res = unc.aggregate(model, metric, [_cond(row)], against_clean=False) if unc is not None and unc.has(model, metric) else None
    if res is None:
        return Stat(row.value, None, None, row.n)
    return Stat(row.value, res.get("low"), res.get("high"), row.n)


def _ordered(shifts: set[str]) -> list[str]:
    known = [s for s in (*IMAGENET_P, *IMAGENET_P_EXTRA) if s in shifts]
    return known + sorted(shifts - set(known))


def stability(rows: Sequence[Row], unc: Any = None) -> list[ModelStability]:
    """Per model (in the rows' order), its stability figures; [] for a run without perturbation sequences."""
    mine = [r for r in rows if r.metric in STABILITY_METRICS and r.value is not None]
    if not mine:
        return []
    models = list(dict.fromkeys(r.model for r in mine))
    by = {(r.model, r.metric, r.shift, r.params_key, int(r.severity)): r for r in mine}
    out = []
    for model in models:
        params = {r.params_key: dict(r.params or {}) for r in mine}
        order = _ordered({r.shift for r in mine})
        keys = sorted({(r.shift, r.params_key, int(r.severity)) for r in mine if r.model == model},
                      key=lambda k: (order.index(k[0]), k[1], k[2]))
        per = []
        for shift, pk, d in keys:
            fp = _stat(by, (model, "flip_prob", shift, pk, d), model, "flip_prob", unc)
            t5 = _stat(by, (model, "t5d", shift, pk, d), model, "t5d", unc)
            fr = fp.scaled(100.0 * 100.0 / ALEXNET_FP[shift]) if shift in ALEXNET_FP and fp.value is not None else None
            tn = t5.scaled(100.0 / ALEXNET_T5D[shift]) if shift in ALEXNET_T5D and t5.value is not None else None
            per.append(PerturbationStability(shift, d, params[pk], fp, t5, fr, tn))
        ten = {p.shift: p for p in per if p.shift in IMAGENET_P and p.difficulty == 1 and not p.params}
        covered = [s for s in IMAGENET_P if s in ten]
        mfr = _mean(model, "flip_prob", [ten[s] for s in covered], by, unc)
        mt5d = _mean(model, "t5d", [ten[s] for s in covered], by, unc)
        out.append(ModelStability(model, per, mfr, mt5d, covered))
    return out


def _mean(model: str, metric: str, per: list[PerturbationStability], by: dict, unc: Any) -> Stat | None:
    """mFR (``flip_prob``) or mT5D (``t5d``) over ``per``, with the interval of the weighted mean over sequences
    resampled jointly (report.stats ``weighted``) when per-sample values are there."""
    if not per:
        return None
    norms = ALEXNET_FP if metric == "flip_prob" else ALEXNET_T5D
    unit = 100.0 * 100.0 if metric == "flip_prob" else 100.0
    weights = [unit / norms[p.shift] / len(per) for p in per]
    stats = [p.fp if metric == "flip_prob" else p.t5d for p in per]
    value = sum(w * s.value for w, s in zip(weights, stats))
    n = min(s.n or 0 for s in stats) or None
    if unc is None or not unc.has(model, metric) or not hasattr(unc, "weighted"):
        return Stat(value, None, None, n)
    conds = [Condition("", "", p.shift, {}, p.difficulty) for p in per]
    res = unc.weighted(model, metric, list(zip(conds, weights)))
    if res is None:
        return Stat(value, None, None, n)
    return Stat(value, res["low"], res["high"], n)


def _fmt(s: Stat | None, digits: int = 1) -> str:
    if s is None or s.value is None:
        return "–"
    ci = f" [{s.low:.{digits}f}, {s.high:.{digits}f}]" if s.low is not None and s.high is not None else ""
    return f"{s.value:.{digits}f}{ci}"


def stability_blocks(entries: Sequence[ModelStability]) -> list[dict[str, Any]]:
    """The report's Stability section (report.blocks): the means, then every perturbation per model."""
    if not entries:
        return []
    head = ["model", "mFR [95% CI]", "mT5D [95% CI]", "perturbations in the means", "sequences"]
    body = []
    for e in entries:
        over = "all 10 (the published mFR, mT5D)" if e.full else f"{len(e.covered)} of 10: {', '.join(e.covered) or 'none'}"
        n = min((p.fp.n or 0 for p in e.perturbations), default=0)
        body.append([e.model, _fmt(e.mfr), _fmt(e.mt5d), over, str(n)])
    blocks: list[dict[str, Any]] = [
        {"kind": "text", "text": (
            "How often each model's prediction changes along ImageNet-P's perturbation sequences (lower is more "
            "stable). FP: the flip probability, the share of compared frame pairs whose top-1 class differs (noise "
            "sequences compare every frame with the first, the others each frame with the one a difficulty's step "
            "before it); T5D: the top-5 distance, how far the top-5 ranking moves between compared frames. FR and "
            "normalised T5D: 100 x the model's figure / AlexNet's (" + NORMALISER_SOURCE + "); mFR and mT5D: their "
            "means over the benchmark's ten perturbations at difficulty 1 (AlexNet = 100; the published ResNet-50: "
            "mFR 58.0, mT5D 78.4). 95% intervals over sequences.")},
        {"kind": "table", "head": head, "rows": body}]
    head = ["model", "perturbation", "difficulty", "FP (%) [95% CI]", "FR", "T5D [95% CI]", "T5D (AlexNet = 100)",
            "sequences"]
    rows = []
    for e in entries:
        for p in e.perturbations:
            shown = p.shift + "".join(f" {k}={v}" for k, v in sorted(p.params.items()))
            rows.append([e.model, shown, str(p.difficulty), _fmt(p.fp.scaled(100.0)), _fmt(p.fr), _fmt(p.t5d, 2),
                         _fmt(p.t5d_norm), str(p.fp.n or p.t5d.n or "")])
    blocks += [{"kind": "heading", "text": "Every perturbation"}, {"kind": "table", "head": head, "rows": rows}]
    return blocks
