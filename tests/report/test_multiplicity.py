"""Many comparisons (issue 39): adjust_p_values against a transcription of Holm (1979) and Benjamini-Hochberg
(1995), and constructed headlines with known exact McNemar p-values whose ≈ marks move exactly where the
correction says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.uncertainty import adjust_p_values
from shiftbench.report.headline import headline
from shiftbench.report.stats import Uncertainty
from shiftbench.report.tables import build_tables
from shiftbench.results.records import Row


def holm_1979(p: list[float], alpha: float) -> list[bool]:
    """Holm's sequentially rejective procedure as published (transcribed): order the p-values; reject H_(1),
    H_(2), ... while p_(i) <= alpha / (m - i + 1); stop at the first that is not."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    reject = [False] * m
    for step, i in enumerate(order, start=1):
        if p[i] > alpha / (m - step + 1):
            break
        reject[i] = True
    return reject


def bh_1995(p: list[float], alpha: float) -> list[bool]:
    """Benjamini and Hochberg's step-up procedure as published (transcribed): k = the largest i with
    p_(i) <= i alpha / m; reject H_(1) .. H_(k)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    k = max((step for step, i in enumerate(order, start=1) if p[i] <= step * alpha / m), default=0)
    reject = [False] * m
    for i in order[:k]:
        reject[i] = True
    return reject


p_vectors = st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 0.025, 0.05, 1.0])), min_size=1,
                     max_size=40)


@settings(max_examples=300, deadline=None)
@given(p=p_vectors, alpha=st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_adjusted_p_values_reject_exactly_what_the_published_procedures_reject(p, alpha):
    for method, procedure in (("holm", holm_1979), ("bh", bh_1995)):
        adjusted = adjust_p_values(p, method)
        assert adjusted.shape == (len(p),) and np.all(adjusted >= np.asarray(p) - 1e-15) and np.all(adjusted <= 1)
        expected = procedure(p, alpha)
        got = list(adjusted <= alpha)
        # the adjusted p equals a threshold only by rounding; away from ties the decisions are the procedure's
        close = np.isclose(adjusted, alpha, rtol=1e-12, atol=0)
        assert [g for g, c in zip(got, close) if not c] == [e for e, c in zip(expected, close) if not c], method
    assert list(adjust_p_values(p, "none")) == list(np.asarray(p, float))


@settings(max_examples=200, deadline=None)
@given(p=p_vectors)
def test_holm_is_never_less_strict_than_bh_and_both_keep_the_order(p):
    holm, bh = adjust_p_values(p, "holm"), adjust_p_values(p, "bh")
    assert np.all(holm >= bh - 1e-12)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(holm[order]) >= -1e-15) and np.all(np.diff(bh[order]) >= -1e-15)


def test_hand_worked_values_and_errors():
    assert adjust_p_values([0.01, 0.04, 0.03, 0.005], "holm").tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust_p_values([0.01, 0.04, 0.03, 0.005], "bh").tolist() == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust_p_values([], "holm").size == 0
    with pytest.raises(ShiftbenchError, match="unknown multiplicity correction 'bonferoni'"):
        adjust_p_values([0.1], "bonferoni")
    with pytest.raises(ShiftbenchError, match=r"lie in \[0, 1\]"):
        adjust_p_values([1.5], "holm")


# -- constructed headlines ----------------------------------------------------------------------------------------

N = 40


def _store(losses: dict[str, int]):
    """Per model: clean all right on N images, snow (severity 1) wrong on the first ``losses[model]`` of them.
    The change's exact McNemar p is 2 x 0.5^losses; two models' snow columns differ by |l_a - l_b| one-way
    discordant pairs (p = 2 x 0.5^|l_a - l_b|, 1 at 0), their clean columns are identical (p = 1)."""
    ids = [f"s{i}" for i in range(N)]
    samples, rows = [], []
    for model, lost in losses.items():
        for shift, severity, values in (("clean", 0, np.ones(N)), ("snow", 1, np.r_[np.zeros(lost), np.ones(N - lost)])):
            samples.append({"model": model, "dataset": "d", "shift": shift, "params": {}, "severity": severity,
                            "metric": "top1", "kind": "mean", "ids": ids, "values": values})
            rows.append(Row(model=model, dataset="d", shift=shift, params={}, severity=severity, metric="top1",
                            value=float(values.mean()), n=N, extra={}))
    return samples, rows


def _headline(losses: dict[str, int], correction: str):
    samples, rows = _store(losses)
    u = Uncertainty(samples)
    tables = build_tables(rows, ["top1"])
    u.annotate(tables[0])
    return headline(rows, tables, ["top1"], u, correction=correction)


def _mcnemar_p(k: int) -> float:
    return min(1.0, 2.0 * 0.5 ** k) if k else 1.0


def test_the_family_is_every_test_the_headline_shows_and_the_marks_follow_the_adjusted_p():
    losses = {"m0": 9, "m1": 8, "m2": 6}
    # raw p: changes 2^-8, 2^-7, 2^-5 (none within noise); pairs m1-m0: clean 1, snow 1; m2-m0: clean 1, snow 0.25
    raw = [_mcnemar_p(9), _mcnemar_p(8), _mcnemar_p(6), 1.0, _mcnemar_p(1), 1.0, _mcnemar_p(3)]
    expected = {"holm": adjust_p_values(raw, "holm"), "bh": adjust_p_values(raw, "bh"), "none": np.asarray(raw)}
    marks = {}
    for method in ("none", "holm", "bh"):
        head = _headline(losses, method)
        cells = [r.cells[1] for r in head.rows] + [c for r in head.pairs.rows for c in r.cells]
        assert [c.p_value for c in cells] == pytest.approx(raw)  # each cell keeps its raw p
        if method == "none":
            assert all(c.p_adjusted is None for c in cells)
        else:
            assert [c.p_adjusted for c in cells] == pytest.approx(expected[method].tolist())
            assert all(c.correction == f"{'Holm' if method == 'holm' else 'Benjamini-Hochberg'} over 7 tests"
                       for c in cells)
        assert [bool(c.noise) for c in cells] == [bool(p >= 0.05) for p in expected[method]]
        marks[method] = [r.cells[1].text.endswith("≈") for r in head.rows]
        assert head.correction == method and ("Holm's step-down" in head.note) == (method == "holm")
    # 2^-5 x 7 / 5 (Holm) and x 7 / 3 (BH) pass 0.05: the third model's drop gains its ≈, the first two keep none
    assert marks == {"none": [False, False, False], "holm": [False, False, True], "bh": [False, False, True]}
    # where Holm and BH part: raw 2^-8, 2^-6, 2^-8 (pairs 1, 0.5, 1, 1); the third smallest, 2^-6, is x 5 under
    # Holm (0.078: ≈) and x 7 / 3 under BH (0.036: no ≈)
    head_h, head_b = _headline({"m0": 9, "m1": 7, "m2": 9}, "holm"), _headline({"m0": 9, "m1": 7, "m2": 9}, "bh")
    assert [r.cells[1].text.endswith("≈") for r in head_h.rows] == [False, True, False]
    assert [r.cells[1].text.endswith("≈") for r in head_b.rows] == [False, False, False]
    assert head_h.rows[1].cells[1].p_adjusted == pytest.approx(5 * 2 ** -6)
    assert head_b.rows[1].cells[1].p_adjusted == pytest.approx(7 / 3 * 2 ** -6)


def test_hover_and_note_name_the_correction_and_both_p_values():
    head = _headline({"m0": 9, "m1": 8, "m2": 6}, "holm")
    cell = head.rows[2].cells[1]
    assert "p = 0.0313 (exact McNemar, against clean); Holm-adjusted p = 0.156 (Holm over 7 tests)" in cell.title
    assert "≈: within noise, Holm-adjusted p >= 0.05 (exact McNemar)" in cell.title
    assert "the 7 paired tests of this headline" in head.note and "each model against the first" in head.note
    assert "Holm-adjusted p >= 0.05" in head.pairs.note
    assert "Holm-adjusted p = " in head.pairs.rows[1].cells[1].title
    plain = _headline({"m0": 9, "m1": 8, "m2": 6}, "none")
    assert "no multiplicity correction" in plain.note and "adjusted p =" not in plain.rows[2].cells[1].title
    with pytest.raises(ShiftbenchError, match="unknown multiplicity correction"):
        _headline({"m0": 1}, "sidak")
