"""A shift parameter holding "/" (a texture path, a hub id) goes through evaluate -> store -> report, and
the report's sample grid shows those conditions with their thumbnails."""

from __future__ import annotations

import zlib

import numpy as np

import shiftbench as sb
import tiny_registry  # noqa: F401  (registers _test_tiny)
from e2e import report_tables
from shiftbench.registry import SHIFTS, Entry, ShiftInfo
from shiftbench.results.store import Store
from shiftbench.shifts.base import ImageShift


class SourceTint(ImageShift):
    """Tints the image with a colour derived from a source name (stands in for a texture path or a hub id)."""

    name = "_test_source_tint"

    def __init__(self, source: str = "plain"):
        self.source = source
        self.config = {"source": source}

    def image_params(self, image, severity, rng):
        return {"strength": 0.15 * severity}

    def apply_image(self, image, params):
        colour = np.frombuffer(zlib.crc32(self.source.encode()).to_bytes(4, "little")[:3], np.uint8).astype(np.float64)
        out = (1 - params["strength"]) * image + params["strength"] * colour
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)



SOURCES = ["stabilityai/stable-diffusion-2-inpainting", "/data/textures/wood/oak 01.png", "100%/a%2Fb"]


def test_report_with_slashes_in_shift_params(tmp_path, monkeypatch):
    # registered for this test only, in a group of its own (other tests count the shifts of theirs)
    SHIFTS.entries()  # load the built-in shifts first
    monkeypatch.setitem(SHIFTS._entries, "_test_source_tint",
                        Entry("_test_source_tint", SourceTint, "test tint by source name", {"group": "_test_tint"},
                              ShiftInfo(family="_test_tint")))
    spec = {
        "dataset": "_test_tiny", "limit": 6, "batch_size": 6, "seed": 0, "metrics": ["top1"],
        "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
        "shifts": ["clean"] + [{"name": "_test_source_tint", "params": {"source": s}, "severities": [2, 4]}
                               for s in SOURCES],
    }
    db = tmp_path / "r.db"
    rows = sb.evaluate(spec, store=db)
    assert {r["params"].get("source") for r in rows if r["shift"] != "clean"} == set(SOURCES)

    # each condition's thumbnails are stored under a key that does not split on the params' "/"
    store = Store(db)
    thumbs = store.artifacts(rows[0]["run_id"], "thumb/")
    store.close()
    assert {t["meta"]["params_key"] for t in thumbs if t["meta"]["shift"] != "clean"} == {
        f'{{"source":"{s}"}}' for s in SOURCES}
    assert all(t["key"].count("/") == 4 + str(t["meta"]["sample_id"]).count("/") for t in thumbs)

    tables, images, html = report_tables(db, tmp_path / "report")
    grid = html[html.index('<table class="grid">'):]
    grid = grid[:grid.index("</table>")]
    # the grid's columns: clean, then each source at its highest severity, each with its 4 sample thumbnails
    for s in SOURCES:
        assert f"_test_source_tint (source={s}) s4" in grid.replace("&#34;", '"')
    assert grid.count("data:image/png;base64,") == 4 * (1 + len(SOURCES))
    # and the thumbnails differ per source: the tint each source gives was applied to what the grid shows
    per_source = {t["meta"]["params_key"]: t["data"] for t in thumbs
                  if t["meta"]["shift"] != "clean" and t["meta"]["severity"] == 4 and t["meta"]["sample_id"] == "img000"}
    assert len(set(per_source.values())) == len(SOURCES)
    # the headline table has one row per condition, sources included
    flat = " ".join(cell for table in tables for row in table for cell in row)
    assert all(s in flat for s in SOURCES)
