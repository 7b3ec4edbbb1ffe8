"""Tiny image files and a CIRR-format folder written in the test itself, for the dataset readers' tests and
the composed-retrieval tests that read a CIRR folder (engine, model contract, end to end)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image


def write_image(path: Path, seed: int, size: tuple[int, int] = (24, 32)) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(arr).save(path)  # PNG keeps bytes exact; JPEG names only where the layout needs .jpg
    return arr


def make_cirr(root: Path, paths: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    names = [f"dev-{i}-0-img{i}" for i in range(7)]
    arrays = {n: write_image(root / "img_raw" / "dev" / f"{n}.png", i, (8, 8)) for i, n in enumerate(names)}
    split = {n: f"./dev/{n}.png" for n in names}
    split.update(paths or {})
    captions = [
        {"pairid": 12, "reference": names[0], "target_hard": names[1], "caption": "make it red",
         "target_soft": {names[1]: 1.0}, "img_set": {"id": 3, "members": names[:6]}},
        {"pairid": 13, "reference": names[6], "target_hard": names[2], "caption": "two of them",
         "img_set": {"id": 4, "members": [names[6], names[2], names[3], names[4], names[5], names[1]]}},
    ]
    (root / "cirr" / "captions").mkdir(parents=True)
    (root / "cirr" / "image_splits").mkdir(parents=True)
    (root / "cirr" / "captions" / "cap.rc2.val.json").write_text(json.dumps(captions))
    (root / "cirr" / "image_splits" / "split.rc2.val.json").write_text(json.dumps(split))
    return arrays
