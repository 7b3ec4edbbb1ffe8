"""report.stats.Uncertainty: the report's intervals and paired tests, against a plain-loop replay of the
same draws, scipy's bootstrap, and the properties a reader relies on (the interval holds the value, the
same store gives the same numbers, identical conditions are noise, a real drop is not)."""

from __future__ import annotations

import numpy as np
import pytest

from samples_synth import synthetic_samples as _synthetic
from shiftbench.metrics.uncertainty import mcnemar, sample_statistic
from shiftbench.condition import Condition
from shiftbench.report.stats import Uncertainty, row_conditions
from shiftbench.report.tables import Cell, Table, build_tables
from shiftbench.results.records import Row


def synthetic_samples(**kw):
    """The shared synthetic samples and rows, the rows typed as the loader gives them (results.records.Row)."""
    samples, rows = _synthetic(**kw)
    return samples, [Row(**r) for r in rows]

NOISE = [("gaussian_noise", {}, 1), ("gaussian_noise", {}, 3), ("gaussian_noise", {}, 5)]
CLEAN = [("clean", {}, 0)]


def by_key(samples):
    return {(s["model"], s["metric"], s["shift"], s["severity"]): s for s in samples}


def replay(u: Uncertainty, tag: str, metric: str, models: list[str], conds: list, terms: list, ranks: bool = False):
    """The bootstrap of sum(coef x statistic) with plain loops: the same seed and the same universe of
    ids (in first-seen order), each resample's ids looked up one by one. The value's interval is the
    interpolated 2.5/97.5% quantiles; a change's (``ranks``) the test's own: the r-th smallest and r-th
    largest resample, r = ceil(0.025 x B), so that it holds 0 exactly when the bootstrap p >= 0.05."""
    universe = []
    for _, s, allowed in terms:
        for i in s["ids"]:
            if (allowed is None or i in allowed) and i not in universe:
                universe.append(i)
    rng = np.random.Generator(np.random.PCG64(u._row_seed([Condition("", "", *c) for c in conds])))
    draws = rng.integers(0, len(universe), size=(u.n_boot, len(universe)))
    boots = []
    for draw in draws:
        total = 0.0
        for coef, s, allowed in terms:
            pos = {i: k for k, i in enumerate(s["ids"])}
            rows = [pos[universe[j]] for j in draw if universe[j] in pos and (allowed is None or universe[j] in allowed)]
            total += coef * sample_statistic(s["kind"], s["values"][rows])
        boots.append(total)
    if ranks:
        r = int(np.ceil(round(0.025 * len(boots), 9)))
        ordered = np.sort(boots)
        return ordered[r - 1], ordered[len(boots) - r]
    return np.quantile(boots, [0.025, 0.975])


@pytest.mark.parametrize("metric", ["top1", "foreground_iou", "miou", "ece"])
def test_joint_interval_over_severities_and_its_change_replay_with_plain_loops(metric):
    samples, _ = synthetic_samples(n=24)
    u = Uncertainty(samples, seed=3, n_boot=200)
    s = by_key(samples)
    res = u.aggregate("m_b", metric, NOISE)
    shifted = [s[("m_b", metric, "gaussian_noise", k)] for k in (1, 3, 5)]
    clean = s[("m_b", metric, "clean", 0)]
    expected_value = np.mean([sample_statistic(x["kind"], x["values"]) for x in shifted])
    assert res["value"] == pytest.approx(expected_value, abs=1e-12)
    assert res["n"] == 24
    low, high = replay(u, "value", metric, ["m_b"], NOISE, [(1 / 3, x, None) for x in shifted])
    assert (res["low"], res["high"]) == pytest.approx((low, high), abs=1e-12)
    # the change pairs ids: severity 3 lacks 5 ids; clean is compared on the ids the severities have
    clean_ids, shifted_ids = set(clean["ids"]), {i for x in shifted for i in x["ids"]}
    terms = [(1 / 3, x, clean_ids) for x in shifted] + [(-1.0, clean, shifted_ids)]
    low, high = replay(u, "delta", metric, ["m_b"], NOISE, terms, ranks=True)
    assert (res["delta_low"], res["delta_high"]) == pytest.approx((low, high), abs=1e-12)
    assert res["noise"] == (low <= 0 <= high) == (res["p_value"] >= 0.05)
    assert 0 <= res["p_value"] <= 1 and res["test"] == "paired bootstrap"  # three severities: no McNemar


def test_mean_column_resamples_models_jointly_and_replays_with_plain_loops():
    samples, rows = synthetic_samples(n=20, metrics=(("top1", "mean"),))
    u = Uncertainty(samples, seed=0, n_boot=150)
    table = build_tables(rows)[0]
    u.annotate(table)
    s = by_key(samples)
    models = ["m_a", "m_b", "m_c"]
    mean = table.cells[("gaussian_noise", "mean")]
    terms = [(1 / 9, s[(m, "top1", "gaussian_noise", k)], None) for m in models for k in (1, 3, 5)]
    low, high = replay(u, "value", "top1", models, NOISE, terms)
    assert (mean.low, mean.high) == pytest.approx((low, high), abs=1e-12)
    assert mean.low <= mean.value <= mean.high


def test_every_cell_gets_an_interval_that_holds_its_value_and_a_paired_test():
    samples, rows = synthetic_samples()
    u = Uncertainty(samples)
    tables = build_tables(rows) + build_tables(rows, per_severity=True)
    for table in tables:
        u.annotate(table)
        for (label, model), cell in table.cells.items():
            assert cell.low is not None and cell.high is not None, (table.metric, label, model)
            if table.metric != "ece":  # ECE's resamples are biased upwards; its interval may sit above it
                assert cell.low - 1e-12 <= cell.value <= cell.high + 1e-12, (table.metric, label, model)
            if label == "clean":
                assert cell.delta_low is None and cell.p_value is None and cell.noise is None
            else:
                assert cell.delta_low <= cell.delta_high and 0 <= cell.p_value <= 1
                # one test per cell: its ≈, its p and its interval agree
                assert cell.noise == (cell.delta_low <= 0 <= cell.delta_high) == (cell.p_value >= 0.05)
                one = len(row_conditions(table, label)) == 1 and model != "mean" and table.metric == "top1"
                assert cell.test == ("exact McNemar" if one else "paired bootstrap"), (table.metric, label, model)
    per_sev = build_tables(rows, per_severity=True)[0]
    triples = lambda conds: [(c.shift, c.params, c.severity) for c in conds]  # noqa: E731
    assert triples(row_conditions(per_sev, "gaussian_noise s3")) == [("gaussian_noise", {}, 3)]
    assert triples(row_conditions(build_tables(rows)[0], "gaussian_noise")) == NOISE


def test_deterministic_and_a_new_model_leaves_other_cells_alone():
    samples, rows = synthetic_samples(models=("m_a", "m_b"))
    more, more_rows = synthetic_samples(models=("m_a", "m_b", "m_c"))
    first, again, bigger = build_tables(rows)[0], build_tables(rows)[0], build_tables(more_rows)[0]
    Uncertainty(samples, seed=5).annotate(first)
    Uncertainty(samples, seed=5).annotate(again)
    Uncertainty(more, seed=5).annotate(bigger)
    for key, cell in first.cells.items():
        assert cell == again.cells[key]
        if key[1] != "mean":
            assert cell == bigger.cells[key]
    other = build_tables(rows)[0]
    Uncertainty(samples, seed=6).annotate(other)
    assert other.cells[("gaussian_noise", "m_a")].low != first.cells[("gaussian_noise", "m_a")].low


def test_identical_conditions_give_zero_change_within_noise():
    samples, _ = synthetic_samples(models=("m_a",), metrics=(("top1", "mean"), ("miou", "iou")))
    for s in list(samples):
        if s["shift"] == "clean":
            samples.append({**s, "shift": "brightness", "severity": 2})
    u = Uncertainty(samples)
    for metric in ("top1", "miou"):
        res = u.aggregate("m_a", metric, [("brightness", {}, 2)])
        assert (res["delta"], res["delta_low"], res["delta_high"], res["p_value"]) == (0.0, 0.0, 0.0, 1.0)
        assert res["noise"] is True
        same = u.compare("m_a", "m_a", metric, NOISE)
        assert (same["diff"], same["low"], same["high"], same["noise"]) == (0.0, 0.0, 0.0, True)


def test_a_real_drop_on_64_samples_is_not_noise():
    ids = [f"s{i}" for i in range(64)]
    clean = {"model": "m", "dataset": "d", "shift": "clean", "params": {}, "severity": 0, "metric": "top1",
             "kind": "mean", "ids": ids, "values": np.ones(64)}
    samples = [clean] + [{**clean, "shift": "snow", "severity": k, "values": np.zeros(64)} for k in (1, 2)]
    u = Uncertainty(samples)
    one = u.aggregate("m", "top1", [("snow", {}, 1)])
    assert one["delta"] == -1.0 and one["noise"] is False and one["p_value"] < 0.001
    assert one["p_value"] == pytest.approx(mcnemar(np.ones(64), np.zeros(64)).p_value)  # exact McNemar: 2^-63
    both = u.aggregate("m", "top1", [("snow", {}, 1), ("snow", {}, 2)])  # two severities: paired bootstrap
    assert both["noise"] is False and both["p_value"] < 0.001 and both["delta_high"] == -1.0
    # 0 of 64 right: not the bootstrap's degenerate [0, 0] but the exact Clopper-Pearson interval (issue 39)
    from scipy.stats import binomtest

    assert (one["low"], one["high"]) == pytest.approx(tuple(binomtest(0, 64).proportion_ci(method="exact")))
    assert one["interval"] and "Clopper-Pearson" in one["interval"]


def test_value_interval_is_close_to_scipys_percentile_bootstrap():
    from scipy.stats import bootstrap

    rng = np.random.default_rng(0)
    for p in (0.3, 0.75):
        values = (rng.random(4000) < p).astype(float)
        u = Uncertainty([{"model": "m", "dataset": "d", "shift": "clean", "params": {}, "severity": 0,
                          "metric": "top1", "kind": "mean", "ids": [str(i) for i in range(4000)], "values": values}])
        res = u.aggregate("m", "top1", CLEAN)
        ref = bootstrap((values,), np.mean, n_resamples=1000, method="percentile", random_state=1).confidence_interval
        assert abs(res["low"] - ref.low) < 0.01 and abs(res["high"] - ref.high) < 0.01  # within a point
        assert res["delta"] is None and res["noise"] is None


def test_compare_is_b_minus_a_on_shared_ids_with_mcnemar_for_top1():
    samples, _ = synthetic_samples(models=("m_a", "m_c"), metrics=(("top1", "mean"),),
                                   missing={("clean", 0): [7]})
    s = by_key(samples)
    # m_c lacks id 3 on clean as well: only the ids both models have are paired
    c = s[("m_c", "top1", "clean", 0)]
    keep = [k for k, i in enumerate(c["ids"]) if i != "img0003"]
    c["ids"], c["values"] = [c["ids"][k] for k in keep], c["values"][keep]
    u = Uncertainty(samples)
    res = u.compare("m_a", "m_c", "top1", CLEAN)
    a, b = s[("m_a", "top1", "clean", 0)], c
    shared = [i for i in a["ids"] if i in b["ids"]]
    xa = np.array([a["values"][a["ids"].index(i)] for i in shared])
    xb = np.array([b["values"][b["ids"].index(i)] for i in shared])
    assert res["n"] == len(shared) == 62
    assert res["diff"] == pytest.approx(xb.mean() - xa.mean(), abs=1e-12)
    assert res["p_value"] == mcnemar(xa, xb).p_value
    assert res["low"] <= res["diff"] <= res["high"]


def test_without_per_sample_values_nothing_is_filled():
    _, rows = synthetic_samples()
    table = build_tables(rows)[0]
    Uncertainty([]).annotate(table)
    assert all(c.low is None and c.p_value is None for c in table.cells.values())
    assert not Uncertainty([]).has("m_a", "top1") and Uncertainty([]).aggregate("m_a", "top1", CLEAN) is None
    samples, _ = synthetic_samples(models=("m_a",))
    only = Uncertainty([s for s in samples if s["severity"] != 5])  # one severity lacks values: no joint interval
    assert only.aggregate("m_a", "top1", NOISE) is None and only.aggregate("m_a", "top1", NOISE[:2]) is not None


def test_ci_and_delta_text():
    table = Table(metric="top1", higher_is_better=True, percent=True, models=["m"], rows=["clean", "snow"])
    table.cells[("clean", "m")] = Cell(0.515, None, 64, low=0.432, high=0.601)
    table.cells[("snow", "m")] = Cell(0.484, -0.031, 64, low=0.401, high=0.567, delta_low=-0.078,
                                      delta_high=0.016, p_value=0.2, noise=True)
    assert table.ci_text("snow", "m") == "48.4 [40.1, 56.7]"
    assert table.delta_text("snow", "m") == "-3.1 [-7.8, +1.6] ≈"
    assert table.delta_text("clean", "m") == "–" and table.ci_text("fog", "m") == "–"
    table.cells[("snow", "m")].noise = False
    assert table.delta_text("snow", "m") == "-3.1 [-7.8, +1.6]"
    table.cells[("fog", "m")] = Cell(0.5, 0.01, 64)
    table.rows.append("fog")
    assert table.ci_text("fog", "m") == "50.0" and table.delta_text("fog", "m") == "+1.0"
    assert table.text("snow", "m") == "48.4 (-3.1)"  # the existing text is unchanged


def test_bad_samples_are_named():
    from shiftbench.errors import ShiftbenchError

    samples, _ = synthetic_samples(models=("m_a",), metrics=(("top1", "mean"),))
    bad = dict(samples[0], ids=samples[0]["ids"][:-1])
    with pytest.raises(ShiftbenchError, match="m_a / top1 / clean s0: 63 ids but values of shape"):
        Uncertainty([bad])
    with pytest.raises(ShiftbenchError, match="ids repeat"):
        Uncertainty([dict(samples[0], ids=["x"] * 64)])
    with pytest.raises(ShiftbenchError, match="kind 'ratio'"):
        Uncertainty([dict(samples[0], kind="ratio")])


# ---- one rule for noise (issue 27): ≈, the p-value and the change's interval come from one named test ----

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from shiftbench.metrics.uncertainty import mcnemar_test, paired_bootstrap  # noqa: E402


def _paired_store(clean: list[int], shifted: list[list[int]], models: tuple[str, ...] = ("m",)):
    """Samples and rows of models with the same right/wrong values: clean, and snow at severities 1, 2, ...
    (``shifted[k]`` at severity k + 1)."""
    ids = [f"s{i}" for i in range(len(clean))]
    samples, rows = [], []
    for model in models:
        for shift, severity, values in [("clean", 0, clean)] + [("snow", k + 1, v) for k, v in enumerate(shifted)]:
            samples.append({"model": model, "dataset": "d", "shift": shift, "params": {}, "severity": severity,
                            "metric": "top1", "kind": "mean", "ids": ids, "values": np.asarray(values, float)})
            rows.append(Row(model=model, dataset="d", shift=shift, params={}, severity=severity, metric="top1",
                            value=float(np.mean(values)), n=len(values), extra={}))
    return samples, rows


pairs = st.integers(1, 48).flatmap(lambda n: st.tuples(st.lists(st.integers(0, 1), min_size=n, max_size=n),
                                                        st.lists(st.integers(0, 1), min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(pairs)
def test_any_paired_right_wrong_vectors_get_one_answer_the_exact_test(pair):
    """For any paired 0/1 vectors (clean, shifted): the cell's test is exact McNemar, the p shown is
    McNemar's, ≈ is shown exactly when p >= 0.05, and the change's interval holds 0 exactly then: in the
    Uncertainty, the results table (Markdown and CSV), the headline cell and its hover text."""
    from shiftbench.report.headline import headline
    from shiftbench.report.tables import to_csv_rows, to_markdown

    clean, shifted = pair
    samples, rows = _paired_store(clean, [shifted])
    u = Uncertainty(samples)
    res = u.aggregate("m", "top1", [("snow", {}, 1)])
    exact = mcnemar_test(clean, shifted)
    assert res["test"] == "exact McNemar" and res["p_value"] == exact.p_value
    assert res["noise"] == (res["p_value"] >= 0.05) == (res["delta_low"] <= 0 <= res["delta_high"])
    assert (res["delta_low"], res["delta_high"]) == (exact.low, exact.high)
    table = build_tables(rows)[0]
    u.annotate(table)
    cell = table.cells[("snow", "m")]
    assert (cell.p_value, cell.noise, cell.test) == (exact.p_value, exact.noise, "exact McNemar")
    md_line = next(line for line in to_markdown(table).splitlines() if line.startswith("| snow |"))
    assert ("≈" in md_line.split("|")[2]) == (exact.p_value >= 0.05)
    csv_row = next(r for r in to_csv_rows(table) if r[1] == "snow" and r[2] == "m")
    assert csv_row[10:] == [repr(exact.p_value), str(exact.p_value >= 0.05).lower(), "exact McNemar"]
    head = headline(rows, [table], ["top1"], u)
    shown = head.rows[0].cells[1]
    assert ("≈" in shown.text) == (exact.p_value >= 0.05)
    assert f"p = {exact.p_value:.3g} (exact McNemar, against clean)" in shown.title
    # two models on one condition: the same test, between them
    samples2, rows2 = _paired_store(clean, [shifted], models=("m",))
    samples2 += [dict(s, model="k", values=np.asarray(shifted if s["shift"] == "clean" else clean, float))
                 for s in samples2]
    cmp = Uncertainty(samples2).compare("m", "k", "top1", [("clean", {}, 0)])
    assert cmp["test"] == "exact McNemar" and cmp["p_value"] == exact.p_value
    assert cmp["noise"] == (cmp["p_value"] >= 0.05) == (cmp["low"] <= 0 <= cmp["high"])


@settings(max_examples=60, deadline=None)
@given(st.integers(4, 40).flatmap(lambda n: st.lists(st.lists(st.integers(0, 1), min_size=n, max_size=n),
                                                      min_size=3, max_size=3)))
def test_a_mean_over_severities_gets_the_paired_bootstrap_and_one_answer(vectors):
    """Several conditions averaged: no McNemar; the bootstrap's p, its ≈ and its interval agree."""
    clean, *shifted = vectors
    samples, rows = _paired_store(clean, shifted)
    u = Uncertainty(samples)
    res = u.aggregate("m", "top1", [("snow", {}, 1), ("snow", {}, 2)])
    assert res["test"] == "paired bootstrap"
    assert res["noise"] == (res["p_value"] >= 0.05) == (res["delta_low"] <= 0 <= res["delta_high"])


def test_cells_where_the_bootstrap_and_mcnemar_disagreed_now_agree():
    """The case of issue 27, built: the bootstrap's interval of the change excludes 0 (before: no ≈) while
    McNemar's p beside it is >= 0.05. Now the cell shows ≈, p of McNemar, and McNemar's interval, holding 0."""
    from shiftbench.report.headline import headline

    clean = [1] * 12 + [0] * 4
    shifted = [0] * 5 + [1] * 7 + [0] * 4  # 5 of 16 lost, none gained: change -31.2 points
    boot = paired_bootstrap(clean, shifted, n_boot=1000)
    exact = mcnemar_test(clean, shifted)
    assert boot.high < 0 and exact.p_value == 0.0625  # the two tests disagreed on this cell
    samples, rows = _paired_store(clean, [shifted])
    u = Uncertainty(samples)
    table = build_tables(rows)[0]
    u.annotate(table)
    cell = table.cells[("snow", "m")]
    assert cell.noise and cell.p_value == 0.0625 and cell.delta_low <= 0 <= cell.delta_high
    text = headline(rows, [table], ["top1"], u).rows[0].cells[1]
    assert text.text == "43.8 (-31.2) ≈" and "p = 0.0625 (exact McNemar, against clean)" in text.title
    assert "≈: within noise, Holm-adjusted p >= 0.05 (exact McNemar)" in text.title  # one test: Holm's p is the raw p
    # one more loss: p = 0.031 < 0.05, no ≈, and the exact interval excludes 0
    shifted[5] = 0
    samples, rows = _paired_store(clean, [shifted])
    res = Uncertainty(samples).aggregate("m", "top1", [("snow", {}, 1)])
    assert res["p_value"] == pytest.approx(0.03125) and not res["noise"] and res["delta_high"] < 0


def test_a_row_is_drawn_once_for_every_model_metric_and_its_change(monkeypatch):
    """Issue 38: every cell of a row (each model, the mean column, the change against clean, the other metric's
    table) reads the resamples made in one pass over the row's draw; the numbers are those of an Uncertainty
    that keeps nothing between cells (ids missing under one condition included: those cells draw on their own)."""
    from shiftbench.report import stats

    draws = []
    real = stats.resample_counts

    def counting(n, n_boot, rng):
        draws.append(n)
        return real(n, n_boot, rng)

    monkeypatch.setattr(stats, "resample_counts", counting)
    metrics = (("top1", "mean"), ("ece", "ece:15"))
    samples, rows = synthetic_samples(n=30, metrics=metrics, missing={})
    tables = build_tables(rows) + build_tables(rows, per_severity=True)
    u = Uncertainty(samples, seed=2, n_boot=100)
    for t in tables:
        u.annotate(t)
    row_keys = {tuple((c.shift, c.params_key, c.severity) for c in row_conditions(t, label))
                for t in tables for label in t.rows}
    assert len(draws) == len(row_keys) < sum(len(t.cells) for t in tables) / 4  # one per row, not one per cell

    samples, rows = synthetic_samples(n=30, metrics=metrics)  # ids 0-4 missing under one severity
    kept = build_tables(rows) + build_tables(rows, per_severity=True)
    u = Uncertainty(samples, seed=2, n_boot=100)
    for t in kept:
        u.annotate(t)
    monkeypatch.setattr(stats, "_MEMO_VECTORS", 0)  # keep nothing: every cell draws again
    fresh = build_tables(rows) + build_tables(rows, per_severity=True)
    v = Uncertainty(samples, seed=2, n_boot=100)
    for t in fresh:
        v.annotate(t)
    assert [t.cells for t in kept] == [t.cells for t in fresh]
