"""What a folder written by ``shiftbench generate`` holds: the shift and severity it was made under.

``generate`` writes ``OUT/<shift>/<severity>/...`` (each such folder a dataset of the source's format again),
with its settings in ``OUT/generate.json`` and one manifest record per output in ``OUT/manifest.jsonl``
(``manifest.partial.jsonl`` while it runs), each record naming the output ``<shift>/<severity>/<file>``. A
reader pointed at ``OUT/<shift>/<severity>`` sees ordinary images, so a run on it would call them "clean";
:func:`generated_origin` tells the run what they are, and the run records it in its dataset identity
(``engine.identity.dataset_fingerprint``, key ``generated``), from which the report labels the run's
unshifted condition with that shift and severity (report/build.py).

>>> import json, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> (out / "fog" / "3" / "cat").mkdir(parents=True)
>>> _ = (out / SETTINGS).write_text(json.dumps({"dataset": "photos/", "seed": 0, "shift_params": {}}))
>>> _ = (out / MANIFEST).write_text("")
>>> origin = generated_origin(out / "fog" / "3")
>>> origin["shift"], origin["severity"], origin["params"], origin["seed"], origin["source"]
('fog', 3, {}, 0, 'photos/')
>>> generated_origin(out / "fog") is None
True
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..severity import canonical

__all__ = ["generated_origin", "SETTINGS", "MANIFEST", "JOURNAL"]

SETTINGS = "generate.json"  # the names engine/generate/ writes above the shift folders
MANIFEST = "manifest.jsonl"
JOURNAL = "manifest.partial.jsonl"


def generated_origin(path: str | os.PathLike) -> dict[str, Any] | None:
    """``{"shift", "severity", "params", "seed", "source", "complete"}`` (and ``"protocol"``, ``"preprocess"``
    when generate had them) for ``path`` = ``OUT/<shift>/<severity>`` (or a shard file in it) of a generate
    output; None for any other path. ``params`` are the shift parameters generate was given, ``source`` the
    dataset it read, ``complete`` whether its manifest is final (False while ``manifest.partial.jsonl`` is
    all there is)."""
    try:
        folder = Path(path).expanduser()
        if folder.is_file():
            folder = folder.parent
        if not folder.is_dir() or not re.fullmatch(r"\d+(\.\d+)?", folder.name):  # 3, or 2.5 (a dial)
            return None
        top = folder.parent.parent
        settings_path = top / SETTINGS
        complete = (top / MANIFEST).is_file()
        if not settings_path.is_file() or not (complete or (top / JOURNAL).is_file()):
            return None
        settings = json.loads(settings_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not readable as generate's settings: an ordinary folder as far as a run can tell
    if not isinstance(settings, dict):
        return None
    origin: dict[str, Any] = {"shift": folder.parent.name, "severity": canonical(float(folder.name)),
                              "params": settings.get("shift_params") or {}, "seed": settings.get("seed"),
                              "source": settings.get("dataset"), "complete": complete}
    for key in ("protocol", "preprocess"):
        if settings.get(key) is not None:
            origin[key] = settings[key]
    return origin
