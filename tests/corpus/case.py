"""The adversarial corpus's case type and the small writers its builders use.

A case is a folder of small generated input files plus one CLI command and the outcome it must have:
the exit status and a piece of the one line the CLI prints. ``tests/corpus/build.py`` writes every case
under ``tests/corpus/cases/<name>/`` (committed), with an ``expect.json`` beside its inputs;
``tests/test_corpus.py`` checks that the script rebuilds the committed bytes and runs each case.

Builders must be deterministic (no clock, no unseeded randomness): the same script gives the same bytes.
In ``argv``, paths are relative to the case folder, and ``{out}`` stands for a fresh empty folder outside
it where the command may write (a store, a generated dataset, a report).
"""

from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str                          # folder name: lowercase words joined by '-'
    build: Callable[[Path], None]      # writes the inputs into the (empty) case folder
    argv: list[str]                    # the shiftbench command, e.g. ["evaluate", "--config", "spec.yaml", ...]
    exit: int                          # expected exit status (2: a user mistake, refused in one line)
    message: str = ""                  # a piece of the output (stdout + stderr) it must contain
    why: str = ""                      # one line: what the case guards against
    kind: str = ""                     # the class: files-lost, numbers, traceback, dry-run, ...
    # more expectations, read by tests/test_corpus.py: "out_empty" (a refused command writes nothing in
    # {out}), "out_files" ({path in {out}: text} written before the command, as a user's own files),
    # "unchanged" (paths in {out} that must keep their bytes); other keys are read by the area's own tests
    extra: dict = field(default_factory=dict)

    def expect(self) -> dict:
        return {"argv": self.argv, "exit": self.exit, "message": self.message, "why": self.why, "kind": self.kind}


def image(h: int = 32, w: int = 32, seed: int = 0) -> np.ndarray:
    """A small structured RGB image (gradients plus seeded noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), 0.5 + 0.5 * np.sin((x + y) / 4.0)], axis=-1)
    img = img + rng.normal(0, 0.05, img.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def png_bytes(img: np.ndarray) -> bytes:
    """PNG bytes written with PIL at a fixed compression (deterministic across runs)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def write_png(path: Path, h: int = 32, w: int = 32, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(image(h, w, seed)))
    return path


def write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n")
    return path


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def checksum(path: Path) -> int:
    return zlib.crc32(path.read_bytes())
