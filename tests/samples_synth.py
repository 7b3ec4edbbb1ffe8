"""Synthetic per-sample values in the store's format (``Store.samples``) and the result rows they imply.

For the uncertainty tests: several models, clean plus shifts at several severities, some ids missing under
one condition, and metrics of every kind (mean, ratio, iou, ece:B). Each row's value is the statistic of
its samples, as the store guarantees.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shiftbench.metrics.uncertainty import sample_statistic

SHIFTS = (("clean", {}, [0]), ("gaussian_noise", {}, [1, 3, 5]), ("background_color", {"color": "red"}, [1]))


def _values(kind: str, n: int, rng: np.random.Generator, skill: float) -> np.ndarray:
    if kind == "mean":
        return (rng.random(n) < skill).astype(np.float64)
    if kind == "ratio":
        union = rng.integers(50, 400, n).astype(np.float64)
        return np.stack([np.floor(union * np.clip(skill + 0.2 * rng.standard_normal(n), 0, 1)), union], 1)
    if kind == "iou":
        classes = 4
        union = rng.integers(0, 300, (n, classes)).astype(np.float64)
        union[:, 3] = 0  # a class no image has: left out of the mean
        inter = np.floor(union * np.clip(skill + 0.2 * rng.standard_normal((n, classes)), 0, 1))
        return np.stack([inter, union], 1)
    confidence = rng.uniform(0.05, 1.0, n)
    return np.stack([confidence, (rng.random(n) < confidence * skill + 0.1).astype(np.float64)], 1)


def synthetic_samples(models: tuple[str, ...] = ("m_a", "m_b", "m_c"), n: int = 64, seed: int = 0,
                      metrics: tuple[tuple[str, str], ...] = (("top1", "mean"), ("foreground_iou", "ratio"),
                                                              ("miou", "iou"), ("ece", "ece:15")),
                      shifts: tuple = SHIFTS, missing: dict[tuple[str, int], list[int]] | None = None,
                      dataset: str = "objects") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(samples, rows). ``missing`` maps (shift, severity) to the sample positions absent there (default:
    ids 0-4 absent under gaussian_noise severity 3, for every model and metric)."""
    missing = {("gaussian_noise", 3): [0, 1, 2, 3, 4]} if missing is None else missing
    ids = [f"img{i:04d}" for i in range(n)]
    samples, rows = [], []
    for m_i, model in enumerate(models):
        for metric, kind in metrics:
            for shift, params, severities in shifts:
                for severity in severities:
                    # a per-condition generator: adding a model or a shift leaves the others' values alone
                    rng = np.random.default_rng([seed, sum(map(ord, model)), sum(map(ord, metric)),
                                                 sum(map(ord, shift)), severity])
                    skill = 0.85 - 0.05 * m_i - 0.08 * severity
                    values = _values(kind, n, rng, skill)
                    gone = set(missing.get((shift, severity), []))
                    keep = [i for i in range(n) if i not in gone]
                    entry = {"model": model, "dataset": dataset, "shift": shift, "params": dict(params),
                             "severity": severity, "metric": metric, "kind": kind,
                             "ids": [ids[i] for i in keep], "values": values[keep]}
                    samples.append(entry)
                    rows.append({"run_id": "run", "model": model, "dataset": dataset, "shift": shift,
                                 "params": dict(params), "severity": severity, "metric": metric,
                                 "value": sample_statistic(kind, entry["values"]), "n": len(keep), "extra": {}})
    return samples, rows
