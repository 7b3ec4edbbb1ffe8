"""The report's Stability section and headline columns (report/stability.py, issue 39): mFR and mT5D from the
stored flip_prob / t5d rows normalised by AlexNet's published figures, their intervals from the sequences
resampled jointly (Uncertainty.weighted), which conditions enter the means, and the headline columns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.condition import Condition
from shiftbench.metrics.stability import ALEXNET_FP, ALEXNET_T5D
from shiftbench.report.headline import headline
from shiftbench.report.stability import stability, stability_blocks
from shiftbench.report.stats import Uncertainty
from shiftbench.report.tables import build_tables
from shiftbench.results.records import Row
from shiftbench.shifts.perturbations import IMAGENET_P


def _store(n: int, seed: int, shifts=IMAGENET_P, models=("m",), extra=()):
    """Per-sequence values (flip shares in [0, 1], top-5 distances in [0, 15]) and their rows, plus clean top1."""
    rng = np.random.default_rng(seed)
    ids = [f"s{i}" for i in range(n)]
    samples, rows = [], []

    def add(model, shift, params, severity, metric, values):
        samples.append({"model": model, "dataset": "d", "shift": shift, "params": params, "severity": severity,
                        "metric": metric, "kind": "mean", "ids": ids, "values": values})
        rows.append(Row(model=model, dataset="d", shift=shift, params=params, severity=severity, metric=metric,
                        value=float(np.mean(values)), n=n, extra={"higher_is_better": metric == "top1"}))

    for model in models:
        add(model, "clean", {}, 0, "top1", rng.integers(0, 2, n).astype(float))
        for shift, params, severity in [(s, {}, 1) for s in shifts] + list(extra):
            add(model, shift, params, severity, "flip_prob", rng.integers(0, 31, n) / 30.0)
            add(model, shift, params, severity, "t5d", rng.uniform(0, 15, n))
    return samples, rows


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**31), st.integers(1, 10))
def test_mfr_is_the_mean_of_alexnet_normalised_flip_rates_with_a_joint_interval(n, seed, k):
    shifts = IMAGENET_P[:k]
    samples, rows = _store(n, seed, shifts)
    unc = Uncertainty(samples, seed=0)
    [entry] = stability(rows, unc)
    fp = {r.shift: r.value for r in rows if r.metric == "flip_prob"}
    t5 = {r.shift: r.value for r in rows if r.metric == "t5d"}
    assert entry.mfr.value == pytest.approx(np.mean([100 * 100 * fp[s] / ALEXNET_FP[s] for s in shifts]))
    assert entry.mt5d.value == pytest.approx(np.mean([100 * t5[s] / ALEXNET_T5D[s] for s in shifts]))
    assert entry.covered == list(shifts) and entry.full == (k == 10)
    assert entry.mfr.low <= entry.mfr.value + 1e-9 and entry.mfr.value - 1e-9 <= entry.mfr.high
    # FR of one perturbation: a fixed multiple of FP, its interval the same multiple of FP's
    p = entry.perturbations[0]
    factor = 100 * 100 / ALEXNET_FP[p.shift]
    assert (p.fr.low, p.fr.high) == pytest.approx((factor * p.fp.low, factor * p.fp.high))


def test_weighted_equals_aggregate_where_the_weights_make_it_a_mean():
    samples, _ = _store(30, 1, IMAGENET_P[:3])
    unc = Uncertainty(samples, seed=5)
    conds = [Condition("", "", s, {}, 1) for s in IMAGENET_P[:3]]
    mean = unc.aggregate("m", "flip_prob", conds, against_clean=False)
    weighted = unc.weighted("m", "flip_prob", [(c, 1 / 3) for c in conds])
    assert weighted["value"] == pytest.approx(mean["value"])
    assert (weighted["low"], weighted["high"]) == pytest.approx((mean["low"], mean["high"]))  # the same draw
    assert unc.weighted("m", "flip_prob", [(Condition("", "", "p_nothing", {}, 1), 1.0)]) is None


def test_only_the_published_conditions_enter_the_means():
    extra = [("p_speckle_noise", {}, 1), ("p_rotate", {}, 2), ("p_translate", {"crop": 96}, 1)]
    samples, rows = _store(12, 2, IMAGENET_P, extra=extra)
    [entry] = stability(rows, Uncertainty(samples, seed=0))
    assert entry.full and entry.covered == list(IMAGENET_P)
    fp = {(r.shift, r.severity): r.value for r in rows if r.metric == "flip_prob" and not r.params}
    ten = [fp[(s, 1)] for s in IMAGENET_P]
    assert entry.mfr.value == pytest.approx(np.mean([100 * 100 * v / ALEXNET_FP[s] for v, s in zip(ten, IMAGENET_P)]))
    shown = {(p.shift, p.difficulty, tuple(p.params.items())) for p in entry.perturbations}
    assert ("p_speckle_noise", 1, ()) in shown and ("p_rotate", 2, ()) in shown and ("p_translate", 1, (("crop", 96),)) in shown
    blocks = stability_blocks([entry])
    text = str(blocks)
    assert "all 10 (the published mFR, mT5D)" in text and "p_translate crop=96" in text


def test_headline_gets_mfr_and_mt5d_columns_only_with_sequences():
    samples, rows = _store(20, 3, IMAGENET_P[:4], models=("a", "b"))
    unc = Uncertainty(samples, seed=0)
    tables = build_tables([r for r in rows if r.metric == "top1"], ["top1"])
    head = headline(rows, tables, ["top1"], unc)
    heads = [c.head for c in head.columns]
    assert heads[-2:] == ["mFR", "mT5D"]
    entries = {e.model: e for e in stability(rows, unc)}
    for row in head.rows:
        mfr = row.cells[heads.index("mFR")]
        assert mfr.text == f"{entries[row.model].mfr.value:.1f}" and not mfr.higher_is_better
        assert "over 4 of ImageNet-P's 10 perturbations" in mfr.title
    plain = headline([r for r in rows if r.metric == "top1"], tables, ["top1"], unc)
    assert "mFR" not in [c.head for c in plain.columns]
    assert stability([r for r in rows if r.metric == "top1"]) == [] and stability_blocks([]) == []
