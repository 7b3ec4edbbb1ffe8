"""A stored run identity: its key, and what changed between two (the store's resume check).

The engine computes an identity (engine/identity.py: fingerprints of the version, weights, ids file and
dataset); the store keeps it with the run and, when the same spec comes back with another one, refuses to
resume it, naming what changed in one line.

>>> describe_changes({"shiftbench": "0.1"}, {"shiftbench": "0.2"})
['shiftbench version changed (0.1 → 0.2)']
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["identity_key", "describe_changes"]


def identity_key(identity: dict[str, Any]) -> str:
    """A short digest of an identity (names a run started with ``new_run``)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _short(value: Any) -> str:
    text = str(value)
    return text[:8] + "…" if len(text) > 12 else text


def describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two identities, one phrase per change (empty when they agree)."""
    changes: list[str] = []
    if old.get("shiftbench") != new.get("shiftbench"):
        changes.append(f"shiftbench version changed ({old.get('shiftbench')} → {new.get('shiftbench')})")
    old_models, new_models = old.get("models") or {}, new.get("models") or {}
    for label in sorted(set(old_models) | set(new_models)):
        a, b = (old_models.get(label) or {}).get("weights"), (new_models.get(label) or {}).get("weights")
        if a != b:
            changes.append(f"model {label!r} weights changed (sha256 {_short(a)} → {_short(b)})")
    a_ids, b_ids = old.get("ids"), new.get("ids")
    if (a_ids or {}).get("sha256") != (b_ids or {}).get("sha256"):
        where = (b_ids or a_ids or {}).get("path", "ids")
        changes.append(f"ids file {where!r} changed (sha256 {_short((a_ids or {}).get('sha256'))} → "
                       f"{_short((b_ids or {}).get('sha256'))})")
    a_data, b_data = old.get("dataset") or {}, new.get("dataset") or {}
    if a_data != b_data:
        parts = []
        for key in sorted(set(a_data) | set(b_data)):
            x, y = a_data.get(key), b_data.get(key)
            if x == y or (key == "sample_ids" and a_data.get("samples") != b_data.get("samples")):
                continue  # the sample count already says the ids changed
            if isinstance(x, dict) and isinstance(y, dict) and "files" in x and "files" in y:
                same_size = (x["files"], x["bytes"]) == (y["files"], y["bytes"])
                # a file's fingerprint is its bytes' SHA-256, a folder's its files' sizes and mtimes
                parts.append(f"{key}: the same size, other contents or file times" if same_size else
                             f"{key}: {x['files']} files/{x['bytes']} bytes → {y['files']} files/{y['bytes']} bytes")
            elif key == "samples":
                parts.append(f"{x} → {y} samples")
            else:
                parts.append(key)
        changes.append(f"dataset {b_data.get('name', a_data.get('name'))!r} changed ({', '.join(parts)})")
    known = {"shiftbench", "models", "ids", "dataset"}
    for key in sorted((set(old) | set(new)) - known):
        if old.get(key) != new.get(key):
            changes.append(f"{key} changed")
    return changes
