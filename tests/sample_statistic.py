"""The statistic of per-sample values (contract section 1 of issue 15) written out plainly: a reference for
the tests, independent of the metrics' and the report's code."""

from __future__ import annotations

import numpy as np

from shiftbench.metrics.classification import bin_index


def statistic(kind: str, values: np.ndarray) -> float:
    """The contract's formulas, written out plainly (a reference independent of the metrics' code)."""
    values = np.asarray(values, np.float64)
    if kind == "mean":
        return float(values.mean())
    if kind == "ratio":
        return float(values[:, 0].sum() / values[:, 1].sum())
    if kind == "iou":
        inter, union = values[:, 0].sum(axis=0), values[:, 1].sum(axis=0)
        present = union > 0
        return float(np.mean(inter[present] / union[present]))
    if kind.startswith("ece:"):
        bins = int(kind.split(":")[1])
        total = 0.0
        for b in range(bins):  # bin by bin, as the definition reads
            inside = bin_index(values[:, 0], bins) == b
            total += abs(values[inside, 1].sum() - values[inside, 0].sum())
        return total / len(values)
    raise AssertionError(kind)
