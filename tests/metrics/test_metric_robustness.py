"""Robustness summaries against the published formulas, computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics import robustness as r


def test_drops_and_gamma():
    assert r.absolute_drop(0.9, 0.6) == pytest.approx(0.3)
    assert r.relative_drop(0.8, 0.6) == pytest.approx(0.25)
    assert r.relative_robustness(0.8, 0.6) == pytest.approx(0.75)
    # a lower-is-better metric (ECE) getting larger is a positive drop
    assert r.absolute_drop(0.05, 0.15, higher_is_better=False) == pytest.approx(0.10)
    assert np.isnan(r.relative_drop(0.0, 0.1))
    with pytest.raises(ShiftbenchError):
        r.absolute_drop(float("nan"), 0.1)


def test_alexnet_constants_are_the_published_ones():
    assert len(r.ALEXNET_ERRORS) == 15
    assert r.ALEXNET_ERRORS["gaussian_noise"] == 0.886428 and r.ALEXNET_ERRORS["jpeg_compression"] == 0.6065
    # the published AlexNet mCE is 100% by construction
    alex = {c: [e] * 5 for c, e in r.ALEXNET_ERRORS.items()}
    assert r.mean_corruption_error(alex) == pytest.approx(1.0)
    assert r.relative_mean_corruption_error(alex, r.ALEXNET_CLEAN_ERROR) == pytest.approx(1.0)


def test_ce_and_mce_by_hand():
    errors = {"fog": [0.1, 0.2, 0.3, 0.4, 0.5], "contrast": [0.2, 0.2, 0.4, 0.6, 0.8]}
    ce_fog = sum(errors["fog"]) / (5 * 0.819324)
    ce_contrast = sum(errors["contrast"]) / (5 * 0.853204)
    assert r.corruption_error(errors["fog"], "fog") == pytest.approx(ce_fog)
    assert r.mean_corruption_error(errors) == pytest.approx((ce_fog + ce_contrast) / 2)
    assert r.mean_corruption_error(errors, normalize=False) == pytest.approx((0.3 + 0.44) / 2)
    clean = 0.1
    rel_fog = (sum(errors["fog"]) - 5 * clean) / (5 * (0.819324 - 0.435))
    rel_contrast = (sum(errors["contrast"]) - 5 * clean) / (5 * (0.853204 - 0.435))
    assert r.relative_corruption_error(errors["fog"], clean, "fog") == pytest.approx(rel_fog)
    assert r.relative_mean_corruption_error(errors, clean) == pytest.approx((rel_fog + rel_contrast) / 2)
    assert r.relative_mean_corruption_error(errors, clean, normalize=False) == pytest.approx(((0.3 - 0.1) + (0.44 - 0.1)) / 2)


def test_bad_inputs():
    with pytest.raises(ShiftbenchError, match="no AlexNet"):
        r.corruption_error([0.1], "rain")
    with pytest.raises(ShiftbenchError, match="fractions"):
        r.corruption_error([45.0], "fog")  # percentages, not fractions
    with pytest.raises(ShiftbenchError, match="at least one"):
        r.mean_corruption_error({})
