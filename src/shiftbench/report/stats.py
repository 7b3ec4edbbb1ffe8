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
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import ShiftbenchError
from ..metrics.uncertainty import (CLOPPER_PEARSON, ChangeTest, SampleStatistic, bootstrap_test, clopper_pearson_interval,
                                   mcnemar_test, percentile_interval, resample_counts)
from ..condition import Condition, params_key
from ..severity import Severity, canonical
from ..severity import label as severity_label
from .tables import CLEAN, Table, condition_label

__all__ = ["Uncertainty", "MCNEMAR_METRICS", "PROPORTION_METRICS", "NOISE_RULE", "NOISE_LEVEL", "BOOTSTRAP_INTERVAL",
           "EDGE_INTERVAL"]

# right/wrong per sample: a single condition against clean (or two models) gets McNemar's exact test
MCNEMAR_METRICS = ("top1", "top5", "answer_accuracy", "unmatched_rate")  # each checked for 0/1 values first
# means of per-sample values in [0, 1] that are proportions (issue 39): a single condition's 0/1 values get the
# exact binomial interval; where the bootstrap collapses at 0% or 100% the exact bound at n replaces it
PROPORTION_METRICS = ("top1", "top5", "flip_prob", "answer_accuracy", "unmatched_rate")
BOOTSTRAP_INTERVAL = "percentile bootstrap"
EDGE_INTERVAL = CLOPPER_PEARSON + " bound, every value at the edge"
NOISE_LEVEL = 0.95  # the report's intervals; ≈ is p >= 1 - NOISE_LEVEL of the change's test
# the rule as every explanation of ≈ states it (How to read this, tables.md, hover texts)
NOISE_RULE = ("exact McNemar where the change compares right/wrong outcomes (top-1, top-5) of one condition "
              "with one other, the paired bootstrap (1000 resamples) elsewhere")

_MEMO_VECTORS = 8192  # resampled statistics of whole conditions kept (n_boot floats each: 64 MB at 1000)


@dataclass
class _Entry:
    """One (model, metric, condition)'s per-sample values; ``pos``: where its ids sit in the run's id index
    (one array shared by every entry with the same id list), ``ids`` the list itself."""

    kind: str
    ids: list[str]
    values: np.ndarray
    pos: np.ndarray
    point: float | None = None  # the statistic over all its ids, once computed

    def prepared(self, rows: np.ndarray | None = None) -> SampleStatistic:
        """The statistic ready for weights (made when needed and not kept: at ImageNet size a prepared
        statistic of every condition would not fit in memory, the values themselves do)."""
        return SampleStatistic(self.kind, self.values if rows is None else self.values[rows])

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The rows of this entry holding the ids at run ``positions`` (all of them present)."""
        if positions is self.pos:
            return np.arange(self.pos.size)
        order = np.argsort(self.pos, kind="stable")
        return order[np.searchsorted(self.pos[order], positions)]


@dataclass
class _Term:
    """``coef`` x the statistic of ``entry`` over its ids that are also in ``allowed`` (a mask over the run's
    id index; None: all)."""

    coef: float
    entry: _Entry
    allowed: np.ndarray | None = None

    def positions(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The run positions of the ids the term uses (the entry's own array when it uses them all), and the
        entry's rows of them (None: all rows)."""
        pos = self.entry.pos
        if self.allowed is None:
            return pos, None
        keep = self.allowed[pos]
        if keep.all():
            return pos, None  # the same array: the entry's kept resamples are reused
        return pos[keep], np.flatnonzero(keep)


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
        self._by_condition: dict[tuple[str, str, Severity], list[_Entry]] = {}
        self._index: dict[str, int] = {}  # the run's sample ids -> position (one array of positions per id list)
        self._lists: dict[int, tuple[list[str], np.ndarray]] = {}  # id(list) -> (the list, its positions)
        self._alike: dict[tuple, list[tuple[list[str], np.ndarray]]] = {}  # equal lists that are other objects
        self._draws: OrderedDict[tuple[int, int], dict[int, tuple[SampleStatistic, np.ndarray]]] = OrderedDict()
        self._kept = 0  # resampled statistics held in the draws' memos
        for s in samples:
            key = (s["model"], s["metric"], s["shift"], params_key(s.get("params") or {}), canonical(s["severity"]))
            where = (f"{s['model']} / {s['metric']} / {condition_label(s['shift'], s.get('params') or {})} "
                     f"s{severity_label(s['severity'])}")
            ids = s["ids"] if isinstance(s["ids"], list) else list(s["ids"])
            values = np.asarray(s["values"])
            if values.shape[:1] != (len(ids),):
                raise ShiftbenchError(f"per-sample values of {where}: {len(ids)} ids but values of shape {values.shape}")
            pos = self._positions(ids, where)
            if ids:
                SampleStatistic(s["kind"], values[:1])  # the kind and the values' shape, checked up front
            if key in self._entries and self._datasets[key] != s.get("dataset"):
                # two datasets under one condition: the tables average them, ids need not pair; no interval
                self._ambiguous.add(key)
            entry = _Entry(str(s["kind"]), ids, values, pos)
            self._entries[key] = entry
            self._by_condition.setdefault(key[2:], []).append(entry)
            self._datasets[key] = s.get("dataset")
            self._pairs.add((s["model"], s["metric"]))

    def _positions(self, ids: list[str], where: str) -> np.ndarray:
        """The run positions of an id list: computed once per distinct list (the loader shares one list object
        between the conditions that scored the same samples; an equal list given as another object is found
        by its length and ends, then compared whole), the repeat check with it."""
        known = self._lists.get(id(ids))
        if known is not None and known[0] is ids:
            return known[1]
        sig = (len(ids), ids[0], ids[-1]) if ids else (0,)
        for other, pos in self._alike.get(sig, []):
            if other == ids:
                self._lists[id(ids)] = (ids, pos)
                return pos
        texts = [str(i) for i in ids]
        if len(set(texts)) != len(texts):
            raise ShiftbenchError(f"per-sample values of {where}: sample ids repeat")
        index = self._index
        pos = np.fromiter((index.setdefault(i, len(index)) for i in texts), np.int64, len(texts))
        self._lists[id(ids)] = (ids, pos)
        self._alike.setdefault(sig, []).append((ids, pos))
        return pos

    def _mask(self, entries: Iterable[_Entry]) -> np.ndarray:
        """The run's id index as a mask: True at the ids any of ``entries`` has."""
        mask = np.zeros(len(self._index), bool)
        for e in entries:
            mask[e.pos] = True
        return mask

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

    def weighted(self, model: str, metric: str, terms: list[tuple[Condition, float]]) -> dict | None:
        """``sum(weight x the statistic under condition)`` for one model (mFR: AlexNet's normalisers as weights,
        report/stability.py) with its 95% percentile bootstrap interval, the ids resampled jointly across the
        conditions (one draw for all of them): ``{"value", "low", "high", "n"}``; None without per-sample values."""
        if not terms:
            return None
        weights: dict[tuple, float] = {}
        for cond, w in terms:
            key = _canonical([cond])[0]
            weights[(key.shift, key.params_key, key.severity)] = float(w)
        conds = _canonical([c for c, _ in terms])
        entries = [self._entry(model, metric, c) for c in conds]
        if any(e is None for e in entries) or len({e.kind for e in entries}) != 1:
            return None
        res = self._bootstrap(conds, [_Term(weights[(c.shift, c.params_key, c.severity)], e)
                                      for c, e in zip(conds, entries)])
        if res is None:
            return None
        value, boots, n = res
        interval = percentile_interval(boots, self.level)
        return {"value": value, "low": interval[0] if interval else None, "high": interval[1] if interval else None,
                "n": n}

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
        terms = [_Term(1.0 / k, b, self._mask([a])) for a, b in zip(ea, eb)]
        terms += [_Term(-1.0 / k, a, self._mask([b])) for a, b in zip(ea, eb)]
        res = self._bootstrap(conds, terms)
        if res is None:
            return None
        diff, boots, n = res
        pair = (ea[0], eb[0]) if k == 1 else None
        return {"diff": diff, "n": n, **_test_fields(self._test(metric, boots, pair)), **self._spread(metric, boots, pair)}

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
            ids_p = np.logical_and.reduce([self._mask([e]) for e in ep[m]])
            ids_m = np.logical_and.reduce([self._mask([e]) for e in em[m]])
            terms += [_Term(1.0 / (len(models) * len(cp)), e, ids_m) for e in ep[m]]
            terms += [_Term(-1.0 / (len(models) * len(cm)), e, ids_p) for e in em[m]]
        res = self._bootstrap(_canonical(cp + cm), terms)
        if res is None:
            return None
        diff, boots, n = res
        pair = (em[models[0]][0], ep[models[0]][0]) if len(models) == 1 and len(cp) == 1 and len(cm) == 1 else None
        return {"diff": diff, "n": n, **_test_fields(self._test(metric, boots, pair)), **self._spread(metric, boots, pair)}

    def annotate(self, table: Table, step: Callable[[str], None] | None = None) -> None:
        """Fill low/high (and, off clean, delta_low/delta_high/p_value/noise) of every cell of ``table``
        whose conditions all have per-sample values; the mean column resamples ids jointly across models.
        ``step(row label)`` is called once per row when done (a progress bar's tick)."""
        for label in table.rows:
            if step is not None:
                step(label)
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
        value, boots, ids = res
        interval, name = self._value_interval(metric, value, boots, ids, [e for es in entries.values() for e in es])
        out: dict[str, Any] = {"value": value, "low": interval[0] if interval else None,
                               "high": interval[1] if interval else None,
                               "n": max(e.pos.size for es in entries.values() for e in es),
                               "delta": None, "delta_low": None, "delta_high": None, "p_value": None, "noise": None,
                               "test": None, "interval": name if interval else None, "se": None, "discordance": None}
        is_clean = all(c.shift == CLEAN for c in conds)
        if not against_clean or is_clean:
            return out
        cleans = {m: self._entry(m, metric, Condition("", "", CLEAN, {}, 0)) for m in models}
        with_clean = [m for m in models if cleans[m] is not None and cleans[m].kind in kinds]
        if not with_clean:
            return out
        delta_terms = []
        for m in with_clean:
            shifted_ids = self._mask(entries[m])
            clean_ids = self._mask([cleans[m]])
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
                   noise=test["noise"], test=test["test"], **self._spread(metric, dboots, pair))
        return out

    def _value_interval(self, metric: str, value: float, boots: np.ndarray, ids: int,
                        entries: list[_Entry]) -> tuple[tuple[float, float] | None, str]:
        """A value's 95% interval and its name. A proportion (``PROPORTION_METRICS``, per-sample values in [0, 1])
        of one model under one condition with 0/1 values gets the exact Clopper-Pearson interval of k right in n
        (coverage at least 95% at every accuracy, 0% and 100% included); any other cell the percentile bootstrap,
        except where that collapses at 0% or 100% (every value at the edge): then the exact bound at n ids, valid
        for any values in [0, 1] (P(all n at 1) <= mean^n). Never a zero-width interval at 0/n or n/n."""
        if metric in PROPORTION_METRICS and all(e.kind == "mean" for e in entries):
            if len(entries) == 1 and entries[0].values.ndim == 1 and np.isin(entries[0].values, (0.0, 1.0)).all():
                v = entries[0].values
                return clopper_pearson_interval(int(np.count_nonzero(v)), int(v.size), self.level), CLOPPER_PEARSON
            finite = boots[np.isfinite(boots)]
            if finite.size and value in (0.0, 1.0) and np.all(finite == value):
                return clopper_pearson_interval(int(value) * ids, ids, self.level), EDGE_INTERVAL
        return percentile_interval(boots, self.level), BOOTSTRAP_INTERVAL

    def _spread(self, metric: str, boots: np.ndarray, pair: tuple[_Entry, _Entry] | None) -> dict[str, Any]:
        """What the smallest detectable change rests on (report.headline): ``se``, the standard deviation of the
        resampled changes (the bootstrap's standard error), and for a right/wrong pair ``discordance``, the share
        of its pairs that disagree (McNemar's)."""
        finite = boots[np.isfinite(boots)]
        out = {"se": float(np.std(finite, ddof=1)) if finite.size > 1 else None, "discordance": None}
        values = self._right_wrong(metric, *pair) if pair is not None else None
        if values is not None:
            out["discordance"] = float(np.mean(values[0] != values[1]))
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
        values = self._right_wrong(metric, a, b)
        return None if values is None else mcnemar_test(*values, self.level)

    def _right_wrong(self, metric: str, a: _Entry, b: _Entry) -> tuple[np.ndarray, np.ndarray] | None:
        """The paired right/wrong values of a and b on their shared ids (top-1/top-5 only), None otherwise."""
        if metric not in MCNEMAR_METRICS or a.kind != "mean" or b.kind != "mean":
            return None
        if a.pos is b.pos:
            x, y = a.values, b.values
        else:
            shared = self._mask([b])[a.pos]
            x, y = a.values[shared], b.values[b.rows_at(a.pos[shared])]
        if not len(x):
            return None
        if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
            return None
        return x, y

    def _bootstrap(self, conds: list[Condition], terms: list[_Term]) -> tuple[float, np.ndarray, int] | None:
        """Point estimate, ``n_boot`` resampled values and the number of ids of ``sum(coef x statistic)``,
        all terms resampled with the same draw of ids (the union of the ids the terms use, in first-seen order)."""
        used = [term.positions() for term in terms]
        if any(pos.size == 0 for pos, _ in used):
            return None  # nothing pairs up (no shared ids): no interval rather than a made-up one
        first = used[0][0]
        if all(pos is first for pos, _ in used):
            universe, cols = first, [None] * len(used)  # every term on the same ids: the common case
        else:
            joined = np.concatenate([pos for pos, _ in used])
            _, seen = np.unique(joined, return_index=True)
            universe = joined[np.sort(seen)]
            where = np.full(len(self._index), -1, np.int64)
            where[universe] = np.arange(universe.size)
            cols = []
            for pos, _ in used:
                c = where[pos]
                cols.append(None if c.size == universe.size and np.array_equal(c, np.arange(c.size)) else c)
        n = int(universe.size)
        plans = [(term.coef, term.entry, rows, col) for term, (_, rows), col in zip(terms, used, cols)]
        point = float(_signed_sum([(coef, np.array([self._point(entry, rows, col, n)]))
                                   for coef, entry, rows, col in plans])[0])
        # whole conditions on the same ids, every model and metric of the row's conditions and of clean: resampled
        # in the same pass over the draw, for the other cells of the row (its mean column, its change, the
        # table of the other metric) to read rather than draw again
        around = [e for c in conds + [Condition("", "", CLEAN, {}, 0)]
                  for e in self._by_condition.get((c.shift, c.params_key, canonical(c.severity)), ())
                  if e.pos is universe]
        boots = self._resampled(self._row_seed(conds), n, plans, around)
        return point, _signed_sum([(coef, b) for (coef, _, _, _), b in zip(plans, boots)]), n

    @staticmethod
    def _point(entry: _Entry, rows: np.ndarray | None, col: np.ndarray | None, n: int) -> float:
        """A term's statistic over its ids (all-ones weights); a whole condition's is kept on its entry."""
        if rows is None and entry.point is not None:
            return entry.point
        ones = np.ones((1, n), np.float64)
        value = float(entry.prepared(rows)(ones if col is None else ones[:, col])[0])
        if rows is None:
            entry.point = value
        return value

    def _resampled(self, seed: int, n: int, plans: list[tuple[float, _Entry, np.ndarray | None, np.ndarray | None]],
                   around: list[_Entry]) -> list[np.ndarray]:
        """Each plan's statistic under the ``n_boot`` resamples of n ids drawn from ``seed`` (the row's draw: it
        depends on neither the model, the metric nor what is computed, so every cell of a row sees the same
        resampled ids, and adding a model changes no one else's draw). A whole condition's resampled statistic
        is kept in the draw's memo; the draw is made again only for what the memo lacks, and then ``around``
        is resampled in the same pass. The memos kept hold at most ``_MEMO_VECTORS`` statistics in all."""
        key = (seed, n)
        memo = self._draws.get(key)
        if memo is None:
            memo = self._draws[key] = {}
        self._draws.move_to_end(key)
        # (entry, its rows or None for all, the draw's columns or None for all); the subsets come first
        todo = [(entry, rows, col) for _, entry, rows, col in plans if rows is not None or col is not None]
        whole = {id(e): e for _, e, rows, col in plans if rows is None and col is None and id(e) not in memo}
        if todo or whole:
            for entry in around:
                if id(entry) not in memo:
                    whole.setdefault(id(entry), entry)
            todo += [(entry, None, None) for entry in whole.values()]
            stats = [entry.prepared(rows) for entry, rows, _ in todo]
            parts: list[list[np.ndarray]] = [[] for _ in todo]
            rng = np.random.Generator(np.random.PCG64(seed))
            # the draw comes in cache-sized chunks (resample_counts), each read by every statistic while it is held
            for counts in resample_counts(n, self.n_boot, rng):
                for k, ((_, _, col), stat) in enumerate(zip(todo, stats)):
                    parts[k].append(stat(counts if col is None else counts[:, col]))
            fresh = [np.concatenate(p) for p in parts]
            subsets = []
            for (entry, rows, col), values in zip(todo, fresh):
                if rows is None and col is None:
                    if id(entry) not in memo:
                        memo[id(entry)] = (entry, values)
                        self._kept += 1
                else:
                    subsets.append(values)
            # a plan on a subset of the ids is never kept: it gets what this pass computed, in plan order
            subset = iter(subsets)
            out = [memo[id(e)][1] if rows is None and col is None else next(subset) for _, e, rows, col in plans]
        else:
            out = [memo[id(e)][1] for _, e, _, _ in plans]
        while self._kept > _MEMO_VECTORS and len(self._draws) > 1:
            _, dropped = self._draws.popitem(last=False)
            self._kept -= len(dropped)
        return out

    def _row_seed(self, conds: list[Condition]) -> int:
        """A 128-bit seed from the run's seed and the row's conditions: stable across builds and platforms."""
        text = json.dumps([self.seed, [[c.shift, c.params_key, c.severity] for c in conds]],
                          sort_keys=True, separators=(",", ":"))
        return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "little")


def _signed_sum(parts: list[tuple[float, np.ndarray]]) -> np.ndarray:
    """sum(coef x values). The positive and the negative terms are summed apart, in the same order, and a
    difference within rounding of 0 is 0: identical conditions then give a change of exactly 0 (and "within
    noise"), not +-1e-17 on either side."""
    size = parts[0][1].shape[0]
    plus = np.zeros(size, np.float64)
    minus = np.zeros(size, np.float64)
    for coef, values in parts:
        if coef >= 0:
            plus += coef * values
        else:
            minus += -coef * values
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
    cell.interval = res.get("interval")
