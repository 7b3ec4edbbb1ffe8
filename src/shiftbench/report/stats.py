"""Confidence intervals and paired tests for the report's cells, from the per-sample values in the store.

``Uncertainty(store.samples(run_id))`` answers, for any model, metric and set of conditions, how sure a
number is: a 95% percentile bootstrap interval of the value, and for its change against clean (shifted minus
clean, the same model, paired by sample id) one test that gives the change's p-value, its interval and its
noise mark together, plus paired differences between two models. ``annotate(table)`` fills those fields of
every cell of a ``tables.Table``.

One rule for noise (issue 27): each change has one test, named in the result's ``test``: exact McNemar
where the change compares right/wrong values (top-1, top-5) of one condition with one other (one
condition against clean, two models on one condition, Mixed-Same against Mixed-Rand for one model), the
paired bootstrap elsewhere (several conditions or models averaged, other metrics). ``noise`` (the ≈ mark)
is p >= 0.05 of that test, and the change's interval is the same test's, so it holds 0 exactly then
(``metrics.uncertainty.mcnemar_test`` / ``bootstrap_test``).

How it resamples (docs/metrics.md, "Uncertainty"):

- The unit is the sample id. A row that averages a shift over severities draws one resample of ids and
  applies it to every severity (and to clean for the change), so what the images share cancels.
- The change against clean resamples only the ids present under both (a sample skipped under one
  condition is absent there); the value's interval resamples all of the condition's ids.
- The mean column (mean over models) resamples ids jointly across the models.
- Each interval has its own generator, ``PCG64`` seeded from a hash of (seed, what is computed, metric,
  models, conditions): the same store gives the same report bytes, and adding a model does not move
  another model's interval.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..errors import ShiftbenchError
from ..metrics.uncertainty import (ChangeTest, SampleStatistic, bootstrap_test, mcnemar_test, percentile_interval,
                                   resample_counts)
from ..condition import Condition, params_key
from ..severity import Severity, canonical
from ..severity import label as severity_label
from .tables import CLEAN, Table, condition_label

__all__ = ["Uncertainty", "MCNEMAR_METRICS", "NOISE_RULE", "NOISE_LEVEL"]

# right/wrong per sample: a single condition against clean (or two models) gets McNemar's exact test
MCNEMAR_METRICS = ("top1", "top5")
NOISE_LEVEL = 0.95  # the report's intervals; ≈ is p >= 1 - NOISE_LEVEL of the change's test
# the rule as every explanation of ≈ states it (How to read this, tables.md, hover texts)
NOISE_RULE = ("exact McNemar where the change compares right/wrong outcomes (top-1, top-5) of one condition "
              "with one other, the paired bootstrap (1000 resamples) elsewhere")

_CACHE_DRAWS = 8  # draws kept: one row's value and change draws, a few times over
_CACHE_CELLS = 4_000_000  # a draw larger than this (n ids x resamples) is not kept


@dataclass
class _Entry:
    """One (model, metric, condition)'s per-sample values, indexed by sample id."""

    kind: str
    ids: list[str]
    values: np.ndarray
    row: dict[str, int]
    stat: SampleStatistic | None = None  # prepared on first use


@dataclass
class _Term:
    """``coef`` x the statistic of ``entry`` over its ids that are also in ``allowed`` (None: all)."""

    coef: float
    entry: _Entry
    allowed: set[str] | None = None

    def ids(self) -> list[str]:
        if self.allowed is None or self.allowed.issuperset(self.entry.ids):
            return self.entry.ids  # the same list: the entry's prepared statistic is reused
        return [i for i in self.entry.ids if i in self.allowed]


class Uncertainty:
    """Bootstrap intervals and paired tests over the per-sample values of one run (``Store.samples``)."""

    def __init__(self, samples: list[dict], seed: int = 0, n_boot: int = 1000, level: float = NOISE_LEVEL):
        if not 0 < level < 1:
            raise ShiftbenchError(f"level must be in (0, 1), got {level!r}")
        if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
            raise ShiftbenchError(f"n_boot must be a positive integer, got {n_boot!r}")
        self.seed, self.n_boot, self.level = int(seed), int(n_boot), float(level)
        self.samples = samples  # as given: the failure points (report.failure) read the same records
        self._entries: dict[tuple[str, str, str, str, Severity], _Entry] = {}
        self._datasets: dict[tuple[str, str, str, str, Severity], str] = {}
        self._ambiguous: set[tuple[str, str, str, str, Severity]] = set()
        self._pairs: set[tuple[str, str]] = set()
        self._cache: dict[tuple[int, int], _Draw] = {}
        self._ones: dict[int, _Draw] = {}
        for s in samples:
            key = (s["model"], s["metric"], s["shift"], params_key(s.get("params") or {}), canonical(s["severity"]))
            where = (f"{s['model']} / {s['metric']} / {condition_label(s['shift'], s.get('params') or {})} "
                     f"s{severity_label(s['severity'])}")
            ids = [str(i) for i in s["ids"]]
            values = np.asarray(s["values"], dtype=np.float64)
            if values.shape[:1] != (len(ids),):
                raise ShiftbenchError(f"per-sample values of {where}: {len(ids)} ids but values of shape {values.shape}")
            row = {i: k for k, i in enumerate(ids)}
            if len(row) != len(ids):
                raise ShiftbenchError(f"per-sample values of {where}: sample ids repeat")
            if ids:
                SampleStatistic(s["kind"], values[:1])  # the kind and the values' shape, checked up front
            if key in self._entries and self._datasets[key] != s.get("dataset"):
                # two datasets under one condition: the tables average them, ids need not pair; no interval
                self._ambiguous.add(key)
            self._entries[key] = _Entry(str(s["kind"]), ids, values, row)
            self._datasets[key] = s.get("dataset")
            self._pairs.add((s["model"], s["metric"]))

    # -- queries ---------------------------------------------------------------------------------------

    def has(self, model: str, metric: str) -> bool:
        """Whether any condition of ``model`` has per-sample values of ``metric``."""
        return (model, metric) in self._pairs

    def aggregate(self, model: str, metric: str, conditions: list[Condition],
                  against_clean: bool = True) -> dict | None:
        """The mean of the statistic over ``conditions`` for one model, with its interval and (against
        clean) the change's interval and p-value; ids resampled jointly across the conditions.
        None when a condition has no per-sample values."""
        return self._aggregate([model], metric, conditions, against_clean)

    def compare(self, model_a: str, model_b: str, metric: str, conditions: list[Condition]) -> dict | None:
        """Paired difference ``b - a`` over the sample ids both models have under each condition:
        ``{"diff", "low", "high", "p_value", "n", "noise", "test"}`` (the interval, p and noise of one test,
        named by ``test``); None without per-sample values."""
        conds = _canonical(conditions)
        ea = [self._entry(model_a, metric, c) for c in conds]
        eb = [self._entry(model_b, metric, c) for c in conds]
        if not conds or any(e is None for e in ea + eb):
            return None
        k = len(conds)
        terms = [_Term(1.0 / k, b, set(a.ids)) for a, b in zip(ea, eb)]
        terms += [_Term(-1.0 / k, a, set(b.ids)) for a, b in zip(ea, eb)]
        res = self._bootstrap(conds, terms)
        if res is None:
            return None
        diff, boots, n = res
        return {"diff": diff, "n": n, **_test_fields(self._test(metric, boots, (ea[0], eb[0]) if k == 1 else None))}

    def contrast(self, models: list[str], metric: str, plus: list[Condition], minus: list[Condition]) -> dict | None:
        """Paired difference, within the same models, of the mean over the ``plus`` conditions minus the mean
        over the ``minus`` conditions (e.g. the BG-Gap: Mixed-Same minus Mixed-Rand), on the sample ids each
        model has under both sides; ids resampled jointly across conditions and models.
        ``{"diff", "low", "high", "p_value", "n", "noise", "test"}``; None without per-sample values."""
        cp, cm = _canonical(plus), _canonical(minus)
        if not cp or not cm or not models:
            return None
        ep = {m: [self._entry(m, metric, c) for c in cp] for m in models}
        em = {m: [self._entry(m, metric, c) for c in cm] for m in models}
        entries = [e for m in models for e in ep[m] + em[m]]
        if any(e is None for e in entries) or len({e.kind for e in entries}) != 1:
            return None
        terms = []
        for m in models:
            ids_p = set.intersection(*(set(e.ids) for e in ep[m]))
            ids_m = set.intersection(*(set(e.ids) for e in em[m]))
            terms += [_Term(1.0 / (len(models) * len(cp)), e, ids_m) for e in ep[m]]
            terms += [_Term(-1.0 / (len(models) * len(cm)), e, ids_p) for e in em[m]]
        res = self._bootstrap(_canonical(cp + cm), terms)
        if res is None:
            return None
        diff, boots, n = res
        pair = (em[models[0]][0], ep[models[0]][0]) if len(models) == 1 and len(cp) == 1 and len(cm) == 1 else None
        return {"diff": diff, "n": n, **_test_fields(self._test(metric, boots, pair))}

    def annotate(self, table: Table) -> None:
        """Fill low/high (and, off clean, delta_low/delta_high/p_value/noise) of every cell of ``table``
        whose conditions all have per-sample values; the mean column resamples ids jointly across models."""
        for label in table.rows:
            conds = row_conditions(table, label)
            if not conds:
                continue
            against = label != CLEAN
            for model in table.models:
                cell = table.cells.get((label, model))
                if cell is None or cell.value is None or not self.has(model, table.metric):
                    continue
                _fill(cell, self._aggregate([model], table.metric, conds, against))
            mean = table.cells.get((label, "mean"))
            present = [m for m in table.models if (label, m) in table.cells and table.cells[(label, m)].value is not None]
            if mean is not None and mean.value is not None and present:
                _fill(mean, self._aggregate(present, table.metric, conds, against))

    # -- machinery -------------------------------------------------------------------------------------

    def _entry(self, model: str, metric: str, cond: Condition) -> _Entry | None:
        key = (model, metric, cond.shift, cond.params_key, canonical(cond.severity))
        if key in self._ambiguous:
            return None
        return self._entries.get(key)

    def _aggregate(self, models: list[str], metric: str, conditions: list[Condition],
                   against_clean: bool) -> dict | None:
        conds = _canonical(conditions)
        if not conds:
            return None
        entries = {m: [self._entry(m, metric, c) for c in conds] for m in models}
        if any(e is None for es in entries.values() for e in es):
            return None
        kinds = {e.kind for es in entries.values() for e in es}
        if len(kinds) != 1:
            return None  # one statistic per metric; a mix (a store written by two versions) has no joint interval
        scale = 1.0 / (len(models) * len(conds))
        value_terms = [_Term(scale, e) for m in models for e in entries[m]]
        res = self._bootstrap(conds, value_terms)
        if res is None:
            return None
        value, boots, _ = res
        interval = percentile_interval(boots, self.level)
        out: dict[str, Any] = {"value": value, "low": interval[0] if interval else None,
                               "high": interval[1] if interval else None,
                               "n": max(len(e.ids) for es in entries.values() for e in es),
                               "delta": None, "delta_low": None, "delta_high": None, "p_value": None, "noise": None,
                               "test": None}
        is_clean = all(c.shift == CLEAN for c in conds)
        if not against_clean or is_clean:
            return out
        cleans = {m: self._entry(m, metric, Condition("", "", CLEAN, {}, 0)) for m in models}
        with_clean = [m for m in models if cleans[m] is not None and cleans[m].kind in kinds]
        if not with_clean:
            return out
        delta_terms = []
        for m in with_clean:
            shifted_ids = {i for e in entries[m] for i in e.ids}
            clean_ids = set(cleans[m].ids)
            # per model, only the ids it has both clean and under the condition(s) pair up
            delta_terms += [_Term(1.0 / (len(with_clean) * len(conds)), e, clean_ids) for e in entries[m]]
            delta_terms.append(_Term(-1.0 / len(with_clean), cleans[m], shifted_ids))
        res = self._bootstrap(conds, delta_terms)
        if res is None:
            return out
        delta, dboots, _ = res
        pair = (cleans[with_clean[0]], entries[with_clean[0]][0]) if len(with_clean) == 1 and len(conds) == 1 else None
        test = _test_fields(self._test(metric, dboots, pair))
        out.update(delta=delta, delta_low=test["low"], delta_high=test["high"], p_value=test["p_value"],
                   noise=test["noise"], test=test["test"])
        return out

    def _test(self, metric: str, boots: np.ndarray, pair: tuple[_Entry, _Entry] | None) -> ChangeTest | None:
        """The one test of a change, which gives its p-value, its ≈ mark and its interval: exact McNemar when
        ``pair`` (a, b) is one condition against one other with right/wrong values (top-1/top-5), else the
        paired bootstrap of the resampled changes ``boots``; None when no resample is defined."""
        if pair is not None:
            exact = self._mcnemar(metric, *pair)
            if exact is not None:
                return exact
        return bootstrap_test(boots, self.level)

    def _mcnemar(self, metric: str, a: _Entry, b: _Entry) -> ChangeTest | None:
        """Exact McNemar test of b against a, two right/wrong conditions on their shared ids (top-1/top-5 only)."""
        if metric not in MCNEMAR_METRICS or a.kind != "mean" or b.kind != "mean":
            return None
        shared = [i for i in a.ids if i in b.row]
        if not shared:
            return None
        x = a.values[[a.row[i] for i in shared]]
        y = b.values[[b.row[i] for i in shared]]
        if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
            return None
        return mcnemar_test(x, y, self.level)

    def _bootstrap(self, conds: list[Condition], terms: list[_Term]) -> tuple[float, np.ndarray, int] | None:
        """Point estimate, ``n_boot`` resampled values and the number of ids of ``sum(coef x statistic)``,
        all terms resampled with the same draw of ids (the union of the ids the terms use)."""
        universe: dict[str, int] = {}
        plans = []
        for term in terms:
            ids = term.ids()
            if not ids:
                return None  # nothing pairs up (no shared ids): no interval rather than a made-up one
            for i in ids:
                universe.setdefault(i, len(universe))
            if ids is term.entry.ids:  # the whole condition: prepared once per entry
                if term.entry.stat is None:
                    term.entry.stat = SampleStatistic(term.entry.kind, term.entry.values)
                stat = term.entry.stat
            else:
                stat = SampleStatistic(term.entry.kind, term.entry.values[[term.entry.row[i] for i in ids]])
            plans.append((term.coef, stat, np.fromiter((universe[i] for i in ids), np.int64, len(ids))))
        n = len(universe)
        plans = [(coef, stat, None if cols.size == n and np.array_equal(cols, np.arange(n)) else cols)
                 for coef, stat, cols in plans]
        ones = self._ones.get(n)
        if ones is None:
            # the point estimate is the statistic under all-ones weights: kept per n like a draw
            ones = self._ones[n] = _Draw([np.ones((1, n), np.float64)], {})
        point = float(_combine(plans, ones.chunks, ones.memo)[0])
        draw = self._draw(conds, n)
        return point, _combine(plans, draw.chunks, draw.memo), n

    def _draw(self, conds: list[Condition], n: int) -> _Draw:
        """The resampled ids of one row (its conditions) over n ids. The draw depends on neither the model,
        the metric nor what is computed: every model of a row, its change against clean and the mean column
        see the same resampled ids (the joint resample), and adding a model changes no one else's draw.
        The last few draws that fit in one chunk are kept with the statistics computed on them, since a
        table asks for the same row once per model, once for the mean and once more for the change."""
        key = (self._row_seed(conds), n)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        rng = np.random.Generator(np.random.PCG64(key[0]))
        chunks = resample_counts(n, self.n_boot, rng)
        if n * self.n_boot > _CACHE_CELLS:
            return _Draw(chunks, None)  # drawn chunk by chunk as used, never all held
        draw = _Draw(list(chunks), {})
        self._cache[key] = draw
        while len(self._cache) > _CACHE_DRAWS:
            self._cache.pop(next(iter(self._cache)))
        return draw

    def _row_seed(self, conds: list[Condition]) -> int:
        """A 128-bit seed from the run's seed and the row's conditions: stable across builds and platforms."""
        text = json.dumps([self.seed, [[c.shift, c.params_key, c.severity] for c in conds]],
                          sort_keys=True, separators=(",", ":"))
        return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "little")


@dataclass
class _Draw:
    """Draw counts of one row's resamples, in chunks, and (when kept) the statistics of whole conditions
    already computed on them, by prepared statistic."""

    chunks: Iterable[np.ndarray]
    memo: dict[int, tuple[SampleStatistic, list[np.ndarray]]] | None


def _combine(plans: list[tuple[float, SampleStatistic, np.ndarray | None]], chunks: Iterable[np.ndarray],
             memo: dict[int, tuple[SampleStatistic, list[np.ndarray]]] | None) -> np.ndarray:
    """sum(coef x statistic) under each resample. The positive and the negative terms are summed apart, in
    the same order, and a difference within rounding of 0 is 0: identical conditions then give a change
    of exactly 0 (and "within noise"), not +-1e-17 on either side."""
    plus_parts, minus_parts = [], []
    chunks = list(chunks) if memo is not None else chunks
    for c, counts in enumerate(chunks):
        plus = np.zeros(counts.shape[0], np.float64)
        minus = np.zeros(counts.shape[0], np.float64)
        for coef, stat, cols in plans:
            if cols is None and memo is not None:
                # a whole condition on a kept draw: computed once for every cell of the row that uses it
                held = memo.setdefault(id(stat), (stat, []))[1]
                if len(held) <= c:
                    held.append(stat(counts))
                values = held[c]
            else:
                values = stat(counts if cols is None else counts[:, cols])
            if coef >= 0:
                plus += coef * values
            else:
                minus += -coef * values
        plus_parts.append(plus)
        minus_parts.append(minus)
    plus, minus = np.concatenate(plus_parts), np.concatenate(minus_parts)
    out = plus - minus
    with np.errstate(invalid="ignore"):
        out[np.abs(out) <= 1e-12 * (np.abs(plus) + np.abs(minus))] = 0.0
    return out


def _canonical(conditions: Iterable[Condition]) -> list[Condition]:
    """Conditions in one order (shift, params, severity), duplicates removed, so the seed and the terms
    do not depend on how a caller listed them."""
    seen = {}
    for c in conditions:
        shift, params, severity = (c.shift, c.params, c.severity) if isinstance(c, Condition) else c  # or a row's triple
        severity = canonical(severity)  # 2.5 stays 2.5 (never merged into 2); 3.0 is 3, as the seed always wrote it
        seen[(shift, params_key(params or {}), severity)] = Condition("", "", shift, dict(params or {}), severity)
    return [seen[k] for k in sorted(seen)]


def row_conditions(table: Table, label: str) -> list[Condition]:
    """The (shift, params, severity) conditions a table row averages: all its severities, or the one its
    label names in a per-severity table ('gaussian_noise s3', 'gaussian_noise s2.5')."""
    meta = table.row_meta.get(label)
    if meta is None:
        return []
    shift, params = meta["shift"], meta.get("params") or {}
    if shift == CLEAN:
        return [Condition("", "", CLEAN, params, 0)]
    base = condition_label(shift, params)
    severities = [canonical(s) for s in meta.get("severities") or []]
    if meta.get("severity") is not None:  # a per-severity row (tables.build_tables records its severity)
        severities = [canonical(meta["severity"])]
    elif label != base:
        m = re.fullmatch(re.escape(base) + r" s(-?\d+(?:\.\d+)?)", label)
        if m is None:
            return []
        severities = [canonical(float(m.group(1)))]
    return [Condition("", "", shift, params, s) for s in severities]


def _test_fields(test: ChangeTest | None) -> dict[str, Any]:
    """A test as the fields of a result: ``low``, ``high``, ``p_value``, ``noise`` and ``test`` (its name)."""
    if test is None:
        return {"low": None, "high": None, "p_value": None, "noise": None, "test": None}
    return {"low": test.low, "high": test.high, "p_value": test.p_value, "noise": test.noise, "test": test.test}


def _fill(cell: Any, res: dict | None) -> None:
    if res is None:
        return
    cell.low, cell.high = res["low"], res["high"]
    cell.delta_low, cell.delta_high = res["delta_low"], res["delta_high"]
    cell.p_value, cell.noise, cell.test = res["p_value"], res["noise"], res.get("test")
