"""The smallest change a run can see (issue 39), the report's intervals at 0% and 100%, and the options that
reach them (``shiftbench report --correction``, ``evaluate --dry-run``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, binomtest, norm

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.uncertainty import CLOPPER_PEARSON, detectable_from_se, detectable_mcnemar
from shiftbench.report.headline import planned_detectable
from shiftbench.report.stats import EDGE_INTERVAL, Uncertainty


def connor_1987_n(delta: float, psi: float, alpha: float, power: float = 0.8) -> float:
    """Connor (1987), pairs needed by McNemar's test (normal approximation), transcribed:
    n = [z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2)]^2 / delta^2."""
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)
    return (za * math.sqrt(psi) + zb * math.sqrt(psi - delta ** 2)) ** 2 / delta ** 2


@settings(max_examples=200, deadline=None)
@given(n=st.integers(20, 200_000), psi=st.floats(0.02, 1.0), alpha=st.sampled_from([0.05, 0.01, 0.05 / 12]))
def test_the_mcnemar_detectable_change_is_connors_n_solved_for_the_change(n, psi, alpha):
    delta = detectable_mcnemar(n, psi, alpha)
    if delta <= psi:  # the observed discordance allows the change: Connor's formula gives back n
        assert connor_1987_n(delta, psi, alpha) == pytest.approx(n, rel=1e-6)
    else:  # a change of delta needs at least delta discordant: the formula at psi = delta
        assert connor_1987_n(delta, delta, alpha) == pytest.approx(n, rel=1e-6)
    assert detectable_mcnemar(4 * n, psi, alpha) < delta  # more images see smaller changes
    assert detectable_mcnemar(n, psi, alpha / 10) > delta  # a stricter alpha sees only larger ones


def test_at_the_detectable_change_the_exact_mcnemar_test_has_about_80_percent_power():
    """Simulated from an explicit generator: pairs discordant with probability psi, split (psi +- delta) / 2."""
    n, psi, alpha = 2000, 0.2, 0.05
    delta = detectable_mcnemar(n, psi, alpha)
    rng = np.random.Generator(np.random.PCG64(39))
    counts = rng.multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], size=4000)
    gained, lost = counts[:, 0], counts[:, 1]
    m = gained + lost
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(gained, lost), m, 0.5))
    assert 0.76 <= np.mean(p < alpha) <= 0.84


@settings(max_examples=100, deadline=None)
@given(sd=st.floats(0.01, 10), n=st.integers(2, 100_000), alpha=st.sampled_from([0.05, 0.005]))
def test_the_mean_detectable_change_is_z_plus_z_times_the_standard_error(sd, n, alpha):
    expected = (norm.ppf(1 - alpha / 2) + norm.ppf(0.8)) * sd / math.sqrt(n)
    assert detectable_from_se(sd / math.sqrt(n), alpha) == pytest.approx(expected, rel=1e-9)


def test_bad_inputs():
    with pytest.raises(ShiftbenchError, match="discordance"):
        detectable_mcnemar(10, 1.5, 0.05)
    assert detectable_mcnemar(3, 0.5, 0.05 / 50) == math.inf  # three images cannot see any change at this alpha


# -- the report's cells ------------------------------------------------------------------------------------------

def _cells(k_clean: int, k_shifted: int, n: int, metric: str = "top1"):
    ids = [f"s{i}" for i in range(n)]
    values = {k: np.r_[np.ones(k), np.zeros(n - k)] for k in (k_clean, k_shifted)}
    return Uncertainty([{"model": "m", "dataset": "d", "shift": shift, "params": {}, "severity": sev, "metric": metric,
                         "kind": "mean", "ids": ids, "values": values[k]}
                        for shift, sev, k in (("clean", 0, k_clean), ("snow", 1, k_shifted), ("snow", 2, k_shifted))])


@pytest.mark.parametrize("n", [1, 5, 48])
@pytest.mark.parametrize("where", ["0", "1", "n-1", "n"])
def test_a_single_condition_proportion_shows_the_exact_interval_at_every_count(n, where):
    k = {"0": 0, "1": 1, "n-1": n - 1, "n": n}[where]
    u = _cells(k, k, n)
    for conds in ([("clean", {}, 0)], [("snow", {}, 1)]):
        res = u.aggregate("m", "top1", conds)
        ref = binomtest(k, n).proportion_ci(method="exact")
        assert res["interval"] == CLOPPER_PEARSON
        assert res["low"] == pytest.approx(ref.low, abs=1e-10) and res["high"] == pytest.approx(ref.high, abs=1e-10)
        assert res["high"] > res["low"]  # never zero width, at 0/n and n/n too


@pytest.mark.parametrize("k", ["0", "n"])
def test_an_averaged_cell_whose_bootstrap_collapses_at_an_edge_shows_the_exact_bound(k):
    n = 30
    u = _cells(0 if k == "0" else n, 0 if k == "0" else n, n, metric="flip_prob")
    res = u.aggregate("m", "flip_prob", [("snow", {}, 1), ("snow", {}, 2)])
    assert res["interval"] == EDGE_INTERVAL and res["high"] > res["low"]
    ref = binomtest(0 if k == "0" else n, n).proportion_ci(method="exact")
    assert (res["low"], res["high"]) == pytest.approx((ref.low, ref.high), abs=1e-10)
    inside = _cells(n // 2, n // 2, n, metric="flip_prob").aggregate("m", "flip_prob", [("snow", {}, 1), ("snow", {}, 2)])
    assert inside["interval"] == "percentile bootstrap"  # away from the edges the bootstrap stays
    other = _cells(n, n, n, metric="miou").aggregate("m", "miou", [("snow", {}, 1)])
    assert other["interval"] == "percentile bootstrap"  # not a proportion: unchanged


# -- the options ----------------------------------------------------------------------------------------------

SMALL = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
         "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2]}], "metrics": ["top1", "ece"],
         "batch_size": 4}


def test_dry_run_states_the_detectable_change_for_the_planned_n(tmp_path):
    import tiny_registry  # noqa: F401  (_test_tiny, _test_noise)
    from click.testing import CliRunner

    from shiftbench.cli import cli

    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(SMALL))
    out = CliRunner().invoke(cli, ["evaluate", "--config", str(path), "--store", str(tmp_path / "r.db"), "--dry-run"],
                             terminal_width=400)
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("smallest detectable change"))
    assert line.startswith(planned_detectable(20, 1, 1, ["top1", "ece"]))  # 20 images, 1 model, 1 shift
    assert "n = 20" in line and "alpha = 0.05" in line and "10% / 20% / 30%" in line and "ece: ±" in line
    assert not (tmp_path / "r.db").exists()
    # the planned family: 2 models x 3 shifts + 1 x (3 + 1) = 10 tests, alpha 0.005
    assert "alpha = 0.005 = 0.05 / 10" in planned_detectable(100, 2, 3, ["top1"])
    expected = 100 * detectable_mcnemar(100, 0.2, 0.005)
    assert f"/ {expected:.1f} /" in planned_detectable(100, 2, 3, ["top1"])


def test_report_takes_a_correction_and_names_it(tmp_path):
    import tiny_registry  # noqa: F401
    from click.testing import CliRunner

    from shiftbench.cli import cli
    from shiftbench.report import build_report

    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(SMALL))
    runner = CliRunner()
    ran = runner.invoke(cli, ["evaluate", "--config", str(path), "--store", str(tmp_path / "r.db"), "--log-samples"])
    assert ran.exit_code == 0, ran.output
    for method, name in (("holm", "Holm&#39;s step-down"), ("bh", "Benjamini-Hochberg"), ("none", "no multiplicity")):
        out = runner.invoke(cli, ["report", "--store", str(tmp_path / "r.db"), "--out", str(tmp_path / method),
                                  "--correction", method])
        assert out.exit_code == 0, out.output
        html = (tmp_path / method / "report.html").read_text()
        assert (name in html) or (name.replace("&#39;", "'") in html), method
        assert "detectable (80% power)" in html
    bad = runner.invoke(cli, ["report", "--store", str(tmp_path / "r.db"), "--out", str(tmp_path / "x"),
                              "--correction", "sidak"])
    assert bad.exit_code == 2 and "sidak" in bad.output
    with pytest.raises(ShiftbenchError, match="unknown multiplicity correction"):
        build_report(tmp_path / "r.db", tmp_path / "y", correction="sidak")
    assert not (tmp_path / "y").exists()
