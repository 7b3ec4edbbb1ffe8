"""The report: files from the store alone, escaped data strings, and a real render in headless Chromium."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401
from shiftbench.datasets.base import Dataset
from shiftbench.registry import DATASETS
from shiftbench.report import build_report
from tiny_registry import TinyDataset

EVIL = "<script>window.pwned=1</script>"


class EvilNames(TinyDataset):
    """The tiny dataset with markup in its class names and captions."""

    def load(self, index):
        s = super().load(index)
        return s.replace(class_name=f"{EVIL} cat {index % 2}", caption=f"<img src=x onerror=alert(1)> {index}")


if "_test_evil" not in DATASETS:
    DATASETS.add("_test_evil", EvilNames)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    spec = {
        "name": f"run {EVIL}",
        "dataset": "_test_evil",
        "models": [{"name": "dummy_classifier", "params": {"label_space": [EVIL, "<b>dog</b>"]}},
                   {"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"], "seed": 3}}],
        "shifts": ["clean", {"name": "_test_noise", "severities": [1, 3, 5]}],
        "metrics": ["top1", "ece"],
        "batch_size": 8,
    }
    sb.evaluate(spec, store=tmp / "r.db")
    build_report(tmp / "r.db", tmp / "out")
    return tmp / "out"


def test_files_written(report_dir):
    for name in ("report.html", "tables.md", "tables.csv", "tables.tex", "severity_curves.png", "drop_heatmap.png",
                 "reliability.png"):
        assert (report_dir / name).stat().st_size > 0, name
    rows = list(csv.reader(io.StringIO((report_dir / "tables.csv").read_text())))
    assert rows[0] == ["metric", "condition", "model", "value", "change_vs_clean", "n"]
    clean = [r for r in rows[1:] if r[0] == "top1" and r[1] == "clean" and r[2] != "mean"]
    assert len(clean) == 2 and all(0 <= float(r[3]) <= 1 for r in clean)
    md = (report_dir / "tables.md").read_text()
    assert "### top1 (%) ↑" in md and "### ece (%) ↓" in md
    assert "\\_test\\_noise" in (report_dir / "tables.tex").read_text()


def test_html_escapes_data_strings(report_dir):
    html = (report_dir / "report.html").read_text()
    assert EVIL not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "http://" not in html and "https://" not in html  # self-contained


def test_report_needs_a_store_with_results(tmp_path):
    from shiftbench.engine.store import Store
    from shiftbench.errors import ShiftbenchError

    with pytest.raises(ShiftbenchError, match="store not found"):
        build_report(tmp_path / "none.db", tmp_path / "o")
    Store(tmp_path / "empty.db").close()
    with pytest.raises(ShiftbenchError, match="holds no runs"):
        build_report(tmp_path / "empty.db", tmp_path / "o")


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is required for this test (the CI script installs it)"
    return path


def test_renders_in_headless_chromium(report_dir, tmp_path):
    from playwright.sync_api import sync_playwright
    from PIL import Image

    requests = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("request", lambda r: requests.append(r.url))
        page.goto((report_dir / "report.html").as_uri())
        page.wait_for_load_state("load")
        # tables are there and visible, with a value in each model's clean cell
        cells = page.locator("table.results:not(.detail) td")
        assert cells.count() == 2 * 2 * 4  # (top1, ece) x (clean, noise) x (condition, 2 models, mean)
        assert page.locator("table.results").first.is_visible()
        first_row = page.locator("table.results").first.locator("tbody tr").first.inner_text()
        assert first_row.startswith("clean")
        # every image decoded
        sizes = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
        assert len(sizes) >= 3 + 4 * 2 and all(done and width > 0 for done, width in sizes)
        # data strings shown as text, never run
        assert page.evaluate("typeof window.pwned") == "undefined"
        assert EVIL in page.inner_text("body")
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert all(u.startswith(("file://", "data:")) for u in requests), requests
    img = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert img.shape[0] > 1500  # tables, figures and grids make a long page
    # split into horizontal bands: most bands carry content (not blank white)
    bands = np.array_split(img, 12)
    busy = [float((b < 235).mean()) for b in bands]
    assert sum(v > 0.005 for v in busy) >= 9, busy


def test_several_runs_in_one_report(tmp_path):
    base = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
            "shifts": ["clean", {"name": "_test_noise", "severities": [2, 4]}], "metrics": ["top1"], "batch_size": 10}
    a = sb.evaluate(dict(base, name="first"), store=tmp_path / "r.db")[0]["run_id"]
    b = sb.evaluate(dict(base, name="second", seed=1), store=tmp_path / "r.db")[0]["run_id"]
    path = build_report(tmp_path / "r.db", tmp_path / "out", run_id=[a, b])
    html = path.read_text()
    assert html.count('<section class="run"') == 2 and "first" in html and "second" in html
    for name in ("run1_tables.md", "run2_tables.md", "run1_severity_curves.png", "run2_tables.csv"):
        assert (tmp_path / "out" / name).exists(), name
    # without a run id: the latest run alone
    single = build_report(tmp_path / "r.db", tmp_path / "one").read_text()
    assert single.count('<section class="run"') == 1 and "second" in single


def test_markdown_blocks_are_data_not_markup():
    from shiftbench.report.build import markdown_blocks

    blocks = markdown_blocks("## Title <b>\n\nsome <i>text</i>\n\n| a | b \\| c |\n|---|---|\n| <x> | 1 |\n")
    assert blocks[0] == {"kind": "heading", "text": "Title <b>"}
    assert blocks[1] == {"kind": "text", "text": "some <i>text</i>"}
    assert blocks[2] == {"kind": "table", "head": ["a", "b | c"], "rows": [["<x>", "1"]]}
