"""The named artifacts of a run: each key the steps write into the store, spelled once, with its reader.

The steps write them (evaluate: the skipped files, the curation, the grid thumbnails; quality; analysis)
and the report reads them through the readers here, so writer and reader cannot drift apart. The keys and
the bytes under them are those of every store written so far.

>>> thumb_key("gaussian_blur", '{"sigma":2}', 3, "img/7")
'thumb/gaussian_blur/%7B%22sigma%22%3A2%7D/3/img/7'
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..severity import Severity, canonical, label

if TYPE_CHECKING:
    from .store import Store

__all__ = ["SKIPPED_ARTIFACT", "CURATION_ARTIFACT", "QUALITY_ARTIFACT", "THUMB_PREFIX", "ANALYSIS_PREFIX",
           "ANALYSIS_RELIANCE", "ANALYSIS_EMBEDDING", "ANALYSIS_GRADCAM_PREFIX", "ANALYSIS_DONE",
           "stored_skipped", "stored_curation", "stored_quality_rows", "thumb_key", "stored_thumbs",
           "thumb_condition", "gradcam_key", "stored_analysis"]

SKIPPED_ARTIFACT = "skipped.json"  # files the reader left out (on_error: skip): [{file, reason}], meta {count}
CURATION_ARTIFACT = "curation.json"  # the spec's curate: section, what it kept
QUALITY_ARTIFACT = "quality/rows.json"  # the quality step's rows
THUMB_PREFIX = "thumb/"  # the report's grid thumbnails: one PNG per (condition, sample), the condition in meta
ANALYSIS_PREFIX = "analysis/"  # every view of the spec's analysis: section
ANALYSIS_RELIANCE = ANALYSIS_PREFIX + "reliance.json"
ANALYSIS_EMBEDDING = ANALYSIS_PREFIX + "embedding.json"
ANALYSIS_GRADCAM_PREFIX = ANALYSIS_PREFIX + "gradcam/"  # one overlay PNG per (model, condition, sample)
ANALYSIS_DONE = ANALYSIS_PREFIX + "done.json"  # written last: its presence means every view is stored


def _json(store: "Store", run_id: str, key: str) -> Any | None:
    found = store.artifacts(run_id, key)
    return json.loads(found[0]["data"]) if found else None


def stored_skipped(store: "Store", run_id: str) -> list[dict[str, Any]]:
    """The files a run's reader left out, ``[{"file", "reason"}, ...]`` ([] when none)."""
    found = _json(store, run_id, SKIPPED_ARTIFACT)
    return [] if found is None else found


def stored_curation(store: "Store", run_id: str) -> dict[str, Any] | None:
    """What the spec's ``curate:`` section kept, or None for a run without one."""
    return _json(store, run_id, CURATION_ARTIFACT)


def stored_quality_rows(store: "Store", run_id: str) -> list[dict[str, Any]]:
    """The quality rows saved in a run (artifact ``quality/rows.json``), or [] when it has none."""
    found = store.artifacts(run_id, QUALITY_ARTIFACT)
    return json.loads(found[0]["data"].decode("utf-8")) if found else []


def thumb_key(shift: str, params_key: str, severity: Severity, sample_id: Any) -> str:
    """The key of a grid thumbnail. Params may hold "/" (a texture path, a hub id), so their key is quoted;
    the sample id is not (the report reads the condition from the meta, not from the key). The severity is
    written as ``severity.label`` does: ``3``, ``2.5``."""
    return f"{THUMB_PREFIX}{shift}/{quote(params_key, safe='')}/{label(severity)}/{sample_id}"


def stored_thumbs(store: "Store", run_id: str) -> list[dict[str, Any]]:
    """A run's grid thumbnails, artifact rows ``{"key", "data", "meta"}`` in key order."""
    return store.artifacts(run_id, THUMB_PREFIX)


def thumb_condition(thumb: dict[str, Any]) -> tuple[str, str, Severity, str]:
    """(shift, params key, severity, sample id) of a thumbnail: from its meta, or from the key of stores
    written before the meta carried them (their params held no "/": such runs could not be reported)."""
    meta = thumb.get("meta") or {}
    if "params_key" in meta:
        return meta["shift"], meta["params_key"], canonical(meta["severity"]), str(meta["sample_id"])
    _, shift, pk, severity, sid = thumb["key"].split("/", 4)
    return shift, pk, canonical(float(severity)), sid


def gradcam_key(model: str, shift: str, params_key: str, severity: Severity, sample_id: Any) -> str:
    """The key of one Grad-CAM overlay; the model's label, the params key and the sample id are quoted; the
    severity written as ``severity.label`` does (``3``, ``2.5``)."""
    return (f"{ANALYSIS_GRADCAM_PREFIX}{quote(model, safe='')}/{shift}/{quote(params_key, safe='')}/"
            f"{label(severity)}/{quote(str(sample_id), safe='')}")


def stored_analysis(store: "Store", run_id: str) -> dict[str, Any]:
    """What a run holds: {"reliance": rows, "embedding": {...}, "gradcam": [artifact rows]} (empty when none)."""
    found: dict[str, Any] = {}
    for item in store.artifacts(run_id, ANALYSIS_PREFIX):
        key = item["key"]
        if key == ANALYSIS_RELIANCE:
            found["reliance"] = json.loads(item["data"])
        elif key == ANALYSIS_EMBEDDING:
            found["embedding"] = json.loads(item["data"])
        elif key.startswith(ANALYSIS_GRADCAM_PREFIX):
            found.setdefault("gradcam", []).append(item)
        elif key == ANALYSIS_DONE:
            found["done"] = json.loads(item["data"])
    return found
