"""Typed records of a store read back, and the one loader every reader uses (report, export, leaderboard, demo).

``load(store, runs, parts)`` opens the store once, checks it, and returns one :class:`Run` per run asked for
(None: the latest; a run id; a list of run ids; :data:`ALL`: every run) with the ``parts`` asked for (``PARTS``):
``results`` (:class:`Row`), ``samples`` (:class:`Samples`), ``predictions`` (:class:`Prediction`; or
``shown_predictions``: only those of the samples with thumbnails, what the report's grids show), ``counts``
(conditions, conditions done) and the artifacts. A run without results is the caller's to judge. The JSON a run
stores beside its rows (identity, curation, a prediction) is parsed here too; the stored objects stay on the run
as they were (exports write them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Collection, Sequence

from ..condition import Condition
from ..errors import ShiftbenchError
from ..severity import Severity, canonical
from .artifacts import (stored_analysis, stored_curation, stored_quality_rows, stored_skipped, stored_thumbs,
                        thumb_condition)
from .store import Store

__all__ = ["ALL", "PARTS", "Fields", "Row", "Samples", "Prediction", "Said", "Run", "Generated", "Curation",
           "Weights", "Data", "load"]

PARTS = frozenset({"results", "samples", "predictions", "shown_predictions", "counts", "skipped", "curation", "analysis", "thumbs",
                   "quality"})
_ARTIFACTS = {"skipped": stored_skipped, "curation": stored_curation, "analysis": stored_analysis,
              "thumbs": stored_thumbs, "quality": stored_quality_rows}


class _All:
    """load(store, ALL): every run of the store, by start."""


ALL = _All()


class Fields:
    """Read access by field name, for readers not yet written against the attributes (``{**row}``: the dict)."""

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Stored(Fields, Condition):
    """A record of one stored condition (shiftbench.condition.Condition, the one condition type)."""

    @property
    def key(self) -> tuple[str, str, str, Severity]:
        """(model, shift, params key, canonical severity): what predictions and per-sample values match on."""
        return self.model, self.shift, self.params_key, canonical(self.severity)


@dataclass(frozen=True)
class Row(_Stored):
    """One result row: a metric's value under a condition, over ``n`` samples (``extra``: the metric's own)."""

    run_id: str = ""
    metric: str = ""
    value: float | None = None
    n: int = 0
    extra: dict[str, Any] | None = None

    @property
    def higher_is_better(self) -> bool:
        return bool((self.extra or {}).get("higher_is_better", True))

    @property
    def bins(self) -> tuple[list[Any], list[Any] | None]:
        """An ECE row's reliability bins: (accuracy per confidence bin, samples per bin or None)."""
        return (self.extra or {}).get("accuracy") or [], (self.extra or {}).get("counts")


@dataclass(frozen=True)
class Samples(_Stored):
    """The per-sample values behind a row: ``values`` (a numpy array in the dtype the store keeps, exactly the
    values written: uint8 for right/wrong, float32 where exact, else float64; convert before arithmetic that
    could wrap) runs over ``ids`` (docs/metrics.md, "Per-sample values"). Records of one load with equal id
    lists share one ``ids`` list: read it, never change it."""

    metric: str = ""
    kind: str = ""
    ids: list[str] = field(default_factory=list)
    values: Any = None


@dataclass(frozen=True)
class Prediction(_Stored):
    """What a model said about one sample under a condition (runs with --log-samples); no dataset stored."""

    sample_id: str = ""
    prediction: Any = None

    @property
    def said(self) -> Said:
        return _parse(Said, self.prediction) if isinstance(self.prediction, dict) else Said()


@dataclass(frozen=True)
class Said(Fields):
    """What a stored prediction says (tasks/*.py ``record``), as far as the report's grids show it."""

    pred_name: str | None = None
    confidence: float | None = None
    correct: bool | None = None
    iou: float | None = None
    caption: Any = None
    detections: int | None = None
    top: list[dict[str, Any]] | None = None


@dataclass
class Run(Fields):
    """A stored run and the parts of it the loader was asked for."""

    run_id: str
    spec: dict[str, Any]
    versions: dict[str, Any]
    seed: int
    started: float
    finished: float | None
    status: str
    identity: dict[str, Any] | None = None
    name: str | None = None
    spec_hash: str | None = None
    git_hash: str | None = None
    host: str | None = None
    rows: list[Row] = field(default_factory=list)
    samples: list[Samples] = field(default_factory=list)
    keeps_samples: bool = True
    predictions: list[Prediction] = field(default_factory=list)
    counts: tuple[int, int] = (0, 0)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    curation: dict[str, Any] | None = None
    analysis: dict[str, Any] = field(default_factory=dict)
    thumbs: list[dict[str, Any]] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)

    @property
    def metrics(self) -> list[str]:
        """The spec's metrics, in its order (the report's preferred order)."""
        return list((self.spec or {}).get("metrics") or [])

    @property
    def generated(self) -> Generated | None:
        """Where a folder written by ``shiftbench generate`` came from, for a run on one (else None)."""
        origin = ((self.identity or {}).get("dataset") or {}).get("generated")
        return _parse(Generated, origin) if origin else None

    @property
    def curated(self) -> Curation | None:
        return _parse(Curation, self.curation) if self.curation else None

    @property
    def version(self) -> str | None:
        """The shiftbench that wrote the run (its identity's, else its recorded versions')."""
        return (self.identity or {}).get("shiftbench") or (self.versions or {}).get("shiftbench")

    @property
    def ids(self) -> Any:
        """The ids file the run read, as its identity recorded it (its sha256), or None."""
        return (self.identity or {}).get("ids")

    @property
    def data(self) -> Data | None:
        """The dataset the run read, as its identity recorded it (None for an older store)."""
        data = (self.identity or {}).get("dataset") or {}
        prints = next((v for v in data.values() if isinstance(v, dict) and "sha256" in v), {})  # its fingerprint
        return Data(data.get("name", ""), data.get("samples", "?"), prints.get("files", "?"),
                    prints.get("sha256")) if data else None

    @property
    def weights(self) -> dict[str, Weights] | None:
        """Each model's recorded weights (None for a run identity without them: an older store)."""
        models = (self.identity or {}).get("models")
        return None if models is None else {name: Weights(fp.get("weights"), fp.get("from"), fp.get("files"))
                                             for name, fp in models.items()}


@dataclass(frozen=True)
class Generated(Fields):
    """Where a folder written by ``shiftbench generate`` came from (datasets/generated.py ``generated_origin``)."""

    shift: str = ""
    severity: Severity = 0
    params: dict[str, Any] | None = None
    seed: int | None = None
    source: str | None = None
    protocol: Any = None
    complete: bool = True


@dataclass(frozen=True)
class Data:
    """A run's dataset as its identity recorded it: name, samples, its fingerprint's files and sha256."""

    name: str
    samples: Any
    files: Any
    sha256: str | None


@dataclass(frozen=True)
class Curation(Fields):
    """What the spec's ``curate:`` section kept (engine/curate.py)."""

    models: list[str] | None = None
    total: int | None = None
    kept: int | None = None
    dropped: dict[str, int] | None = None
    wrong_per_model: dict[str, int] | None = None


@dataclass(frozen=True)
class Weights:
    """A model's weights as the run identity recorded them (engine/identity.py): ``origin`` is its ``from``."""

    sha256: str | None = None
    origin: str | None = None  # "files", "parameters" or "none"
    files: list[str] | None = None


def _parse(cls: type, data: dict[str, Any]) -> Any:
    """A record of ``cls`` from a stored JSON object: the fields it knows (a later writer may add others)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def load(store: str | os.PathLike, runs: str | Sequence[str] | _All | None = None,
         parts: Collection[str] = ("results",), check: bool = True) -> list[Run]:
    """The runs ``runs`` of ``store`` with ``parts`` (module doc); ``check``: SQLite's check of every page first.
    A damaged store is one StoreError; an unknown run id is the store's error."""
    if set(parts) - PARTS:
        raise ValueError(f"unknown parts {sorted(set(parts) - PARTS)} (parts: {', '.join(sorted(PARTS))})")
    with Store(store, create=False) as db:
        if check:
            db.check()
        keeps = db.keeps_samples() if "samples" in parts else True
        if isinstance(runs, _All):
            ids = [r["run_id"] for r in db.runs()]
            if not ids:
                raise ShiftbenchError(f"{store}: the store holds no runs")
        elif isinstance(runs, (list, tuple)):
            ids = list(runs)
        else:
            ids = [db.run(runs)["run_id"]]
        lists: dict[str, list[str]] = {}  # the id lists decoded by this load: equal lists are one object
        return [_run(db, rid, parts, keeps, lists) for rid in ids]


def _run(db: Store, run_id: str, parts: Collection[str], keeps: bool, lists: dict[str, list[str]]) -> Run:
    run = _parse(Run, {**db.run(run_id), "keeps_samples": keeps})  # a column an older store lacks: its default
    if "counts" in parts:
        run.counts = db.condition_counts(run_id)
    if "results" in parts:
        run.rows = [Row(**r) for r in db.rows(run_id)]
    with db.reading("an artifact of run " + repr(run_id)):
        for part in sorted(set(parts) & set(_ARTIFACTS)):
            setattr(run, part, _ARTIFACTS[part](db, run_id))
    if "samples" in parts:
        # in the dtype stored (uint8 for right/wrong): an ImageNet-sized run's values fit in memory several times over
        run.samples = [Samples(**s) for s in db.iter_samples(run_id, dtype=None, lists=lists)]
    if "predictions" in parts:
        run.predictions = [Prediction(dataset="", **p) for p in db.predictions(run_id)]
    elif "shown_predictions" in parts:  # only the samples with thumbnails: what the report's grids show
        with db.reading("an artifact of run " + repr(run_id)):
            shown = sorted({thumb_condition(t)[3] for t in (run.thumbs if "thumbs" in parts
                                                            else stored_thumbs(db, run_id))})
        run.predictions = [Prediction(dataset="", **p) for p in db.predictions(run_id, shown)] if shown else []
    return run
