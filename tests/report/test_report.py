"""The report: files from the store alone, escaped data strings, and a real render in headless Chromium."""

from __future__ import annotations

import csv
import io
import re
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
    assert rows[0] == ["metric", "condition", "model", "value", "change_vs_clean", "n", "ci_low", "ci_high",
                       "change_ci_low", "change_ci_high", "p_value", "within_noise", "test"]
    clean = [r for r in rows[1:] if r[0] == "top1" and r[1] == "clean" and r[2] != "mean"]
    assert len(clean) == 2 and all(0 <= float(r[3]) <= 1 for r in clean)
    # every top-1 cell has its 95% CI around the value; shifted cells a paired change CI around the change,
    # a p-value, within_noise exactly when that CI holds 0 and p >= 0.05, and the test that gave all three
    for r in rows[1:]:
        if r[0] != "top1":
            continue
        value, low, high = float(r[3]), float(r[6]), float(r[7])
        assert low <= value <= high and r[5] == "20"  # samples per condition, not summed over severities
        if r[1] != "clean":
            change, dlow, dhigh = float(r[4]), float(r[8]), float(r[9])
            assert dlow <= dhigh and 0 <= float(r[10]) <= 1
            assert r[11] == str(dlow <= 0 <= dhigh).lower() == str(float(r[10]) >= 0.05).lower()
            assert r[12] == ("exact McNemar" if " s" in r[1] and r[2] != "mean" else "paired bootstrap")
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
    from shiftbench.errors import ShiftbenchError
    from shiftbench.results.store import Store

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
    from markdown_parse import markdown_blocks

    blocks = markdown_blocks("## Title <b>\n\nsome <i>text</i>\n\n| a | b \\| c |\n|---|---|\n| <x> | 1 |\n")
    assert blocks[0] == {"kind": "heading", "text": "Title <b>"}
    assert blocks[1] == {"kind": "text", "text": "some <i>text</i>"}
    assert blocks[2] == {"kind": "table", "head": ["a", "b | c"], "rows": [["<x>", "1"]]}


# -- a store like the demo's: the layout a newcomer reads ------------------------------------------
CLASSIFY = {
    "name": "classify", "dataset": "objects", "dataset_params": {"scenes_per_object": 1}, "limit": 12, "seed": 0,
    "models": [{"name": "dummy_classifier", "params": {"label_space": "imagenet1k", "seed": s}} for s in (0, 1, 2)],
    "metrics": ["top1", "ece"], "batch_size": 12,
    "shifts": ["clean", {"name": "gaussian_noise", "severities": [2, 4]}, {"name": "fog", "severities": [2, 4]},
               {"name": "background_color", "severity": 5, "params": {"color": "red"}},
               {"name": "object_only", "severity": 5}, "background_only"],
}
RETRIEVAL = {
    "name": "retrieval", "dataset": "objects-cir", "dataset_params": {"split": "val"},
    "models": ["image_only", "text_only", "sum_fusion", "combiner"], "limit": 20,
    "shifts": ["clean", {"name": "gaussian_noise", "severity": 5}, {"name": "text_swap", "severity": 3}],
    "metrics": ["recall", "recall_subset", "rank"],
}


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory):
    """Two runs in one store and one report, as `shiftbench demo` writes them: classification
    (3 classifiers, 2 corruptions x 2 severities, a background family and both controls) and composed retrieval."""
    from cir_fakes import fake_retrievers

    tmp = tmp_path_factory.mktemp("demo_like")
    a = sb.evaluate(CLASSIFY, store=tmp / "r.db")[0]["run_id"]
    b = sb.evaluate(RETRIEVAL, store=tmp / "r.db", models=fake_retrievers())[0]["run_id"]
    html = build_report(tmp / "r.db", tmp / "out", run_id=[a, b])
    return {"store": tmp / "r.db", "html": html, "runs": [a, b]}


def test_demo_like_report_in_chromium(demo_like, tmp_path):
    from playwright.sync_api import sync_playwright
    from PIL import Image

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        page.goto(demo_like["html"].as_uri())
        page.wait_for_load_state("load")
        # the headline (one table per run) comes before the contents, which come before the first detailed table
        heads = page.locator("table.headline")
        assert heads.count() == 2
        head_box = heads.last.bounding_box()
        toc_box = page.locator("nav.toc").bounding_box()
        first_results = page.locator("table.results").first.bounding_box()
        assert head_box["y"] + head_box["height"] <= toc_box["y"] < first_results["y"]
        # every contents link lands on an element
        targets = page.evaluate("Array.from(document.querySelectorAll('nav.toc a')).map(a => a.getAttribute('href'))")
        assert len(targets) >= 2 + 2 * 3 and all(t.startswith("#") for t in targets)
        missing = page.evaluate("ids => ids.filter(id => !document.getElementById(id))", [t[1:] for t in targets])
        assert missing == []
        # every numeric cell of the results tables (folded ones too) carries its n
        cells = page.evaluate("""Array.from(document.querySelectorAll('table.results td:not(:first-child)'))
                                   .map(td => [td.textContent, td.getAttribute('title') || ''])""")
        numeric = [(text, title) for text, title in cells if any(ch.isdigit() for ch in text)]
        assert len(numeric) > 100
        assert all("n = " in title for _, title in numeric), [c for c in numeric if "n = " not in c[1]][:3]
        # the headline: n per model line, and the columns that apply to each run only
        heads_text = [heads.nth(i).inner_text() for i in range(2)]
        # two corruptions at two severities: their mean, never mCE (ImageNet-C's 15 x 5 only)
        assert "mean of 2 corruptions" in heads_text[0] and "mCE" not in heads_text[0]
        assert "object_only" in heads_text[0] and "γ@10" not in heads_text[0]
        assert "γ@10 text shifts, severity 3" in heads_text[1] and "mCE" not in heads_text[1]
        # the headline metric's table is open, the others fold; the retrieval one is R@10, not R@1
        open_tables = page.evaluate("""Array.from(document.querySelectorAll('table.results'))
                                        .filter(t => !t.closest('details:not([open])')).map(t => t.dataset.metric)""")
        assert open_tables == ["top1", "R@10"]
        assert page.locator("table.results[data-metric='R@10']").is_visible()
        assert not page.locator("table.results[data-metric='R@1']").is_visible()
        # sample grids: labels wrap between words only, and the grids fit the page with every section open
        style = page.evaluate("(s => [s.overflowWrap, s.wordBreak, s.hyphens])(getComputedStyle(document.querySelector('table.grid th')))")
        assert style == ["normal", "normal", "none"]
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        squeezed = page.evaluate("""Array.from(document.querySelectorAll('table.grid'))
                                      .filter(t => t.parentElement.scrollWidth > t.parentElement.clientWidth + 1).length""")
        assert squeezed == 0
        browser.close()
    height = Image.open(shot).size[1]
    print(f"\ndemo-like report: full-page screenshot {height} px tall at 1400 px wide")
    assert 1500 < height < 8000


def test_no_markdown_in_visible_text(demo_like):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(demo_like["html"].as_uri())
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # read everything
        text = page.evaluate("document.body.innerText")
        browser.close()
    assert "ObjectCompose" in text and "gamma" in text.lower()
    assert "**" not in text and "`" not in text


def test_headline_numbers_are_the_rows(demo_like):
    """Reference: the headline's numbers recomputed by hand from the stored rows."""
    from shiftbench.report.headline import headline
    from shiftbench.report.tables import build_tables
    from shiftbench.results.records import load

    rows, cir = (run.rows for run in load(demo_like["store"], demo_like["runs"][:2]))
    h = headline(rows, build_tables([r for r in rows if "[" not in r.metric], ["top1", "ece"]), ["top1", "ece"])
    assert h.metric == "top1"
    heads = [(c.group, c.head) for c in h.columns]
    # 2 of the 15 corruptions at 2 of the 5 severities: their mean, no mCE (the note says why); the colour
    # background is a synthetic background, not a natural one
    assert heads == [("clean", "top1 (%)"), ("corruptions", "mean of 2 corruptions"),
                     ("synthetic backgrounds", "color"), ("controls", "object_only"), ("controls", "background_only")]
    assert [g for g, _ in h.groups] == ["clean", "corruptions", "synthetic backgrounds", "controls"]
    assert "this run has 2 of 15 at severities 2, 4, so the headline shows their mean" in h.note
    top1 = {(r.model, r.shift, r.severity): r.value for r in rows if r.metric == "top1"}
    for line in h.rows:
        m = line.model
        clean = top1[(m, "clean", 0)]
        corr = [top1[(m, s, v)] for s in ("gaussian_noise", "fog") for v in (2, 4)]
        mean = sum(corr) / 4
        assert line.n == 12
        assert line.cells[0].text == f"{100 * clean:.1f}"
        assert line.cells[1].text == f"{100 * mean:.1f} ({100 * (mean - clean):+.1f})"
        colour = top1[(m, "background_color", 5)]
        assert line.cells[2].text == f"{100 * colour:.1f} ({100 * (colour - clean):+.1f})"
        only = top1[(m, "background_only", 5)] if (m, "background_only", 5) in top1 else \
            next(v for k, v in top1.items() if k[:2] == (m, "background_only"))
        assert line.cells[4].text.startswith(f"{100 * only:.1f} (")  # the control alone, never averaged
        assert all("n = 12" in c.title for c in line.cells)
    # retrieval: clean R@10 and the mean gamma@10 over the image / the text shifts
    hc = headline(cir, build_tables([r for r in cir if "[" not in r.metric and not r.metric.startswith("gamma@")]),
                  ["recall", "recall_subset", "rank"])
    assert hc.metric == "R@10"
    assert [c.head for c in hc.columns] == ["R@10 (%)", "mean of 1 corruption", "mean of 1 text shift",
                                                  "γ@10 image shifts, severity 5", "γ@10 text shifts, severity 3"]
    gamma = {(r.model, r.shift): r.value for r in cir if r.metric == "gamma@10"}
    r10 = {(r.model, r.shift): r.value for r in cir if r.metric == "R@10"}
    for line in hc.rows:
        m = line.model
        change = r10[(m, "text_swap")] - r10[(m, "clean")]
        assert line.cells[2].text == f"{100 * r10[(m, 'text_swap')]:.1f} ({100 * change:+.1f})"
        assert line.cells[3].text == f"{gamma[(m, 'gaussian_noise')]:.3f}"
        assert line.cells[4].text == f"{gamma[(m, 'text_swap')]:.3f}"


def test_metric_order_grids_and_figures_follow_the_tables(demo_like):
    from html.parser import HTMLParser

    html = demo_like["html"].read_text()
    metrics = re.findall(r'<table class="results" data-metric="([^"]*)"', html)
    cir = metrics[metrics.index("R@1"):]
    assert cir[:7] == ["R@1", "R@5", "R@10", "R@50", "R_subset@1", "R_subset@2", "R_subset@3"]
    assert metrics[:2] == ["top1", "ece"]
    # heat map and severity curves of the retrieval run on R@10, its headline metric
    out = demo_like["html"].parent
    assert (out / "run2_drop_heatmap.png").exists()
    assert "Change of R@10 against clean" in html and "Change of R@1 against" not in html

    class Grid(HTMLParser):
        def __init__(self):
            super().__init__()
            self.heads, self.inside, self.cell = [], False, None

        def handle_starttag(self, tag, attrs):
            if tag == "table" and ("class", "grid") in attrs:
                self.inside = True
                self.heads.append([])
            elif self.inside and tag == "th":
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "th" and self.cell is not None:
                self.heads[-1].append(self.cell.strip())
                self.cell = None
            elif tag == "table":
                self.inside = False

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    grid = Grid()
    grid.feed(html)
    columns = [c for c in grid.heads[0][1:]]
    assert columns == ["clean", "gaussian_noise s4", "fog s4", "background_color (color=red) s5", "object_only s5",
                       columns[5]] and columns[5].startswith("background_only")
    assert "overflow-wrap: normal; word-break: normal; hyphens: none" in html


class _FakeUncertainty:
    """Stands in for part STATS' report.stats.Uncertainty (same calls): fixed intervals, every
    change "within noise", so the test sees where the report puts them."""

    calls: list = []

    def __init__(self, samples, seed=0, n_boot=1000, level=0.95):
        assert samples and seed == 0
        self.samples = samples

    def has(self, model, metric):
        return True

    def annotate(self, table, step=None):
        for cell in table.cells.values():
            if cell.value is not None:
                cell.low, cell.high, cell.noise, cell.p_value = cell.value - 0.05, cell.value + 0.05, True, 0.5
                cell.delta_low, cell.delta_high = -0.1, 0.1

    def aggregate(self, model, metric, conditions, against_clean=True):
        _FakeUncertainty.calls.append((model, metric, tuple(c.shift for c in conditions)))
        return {"value": 0.25, "low": 0.2, "high": 0.3, "n": 7, "delta": -0.01, "delta_low": -0.05,
                "delta_high": 0.03, "p_value": 0.6, "noise": True}


def test_confidence_intervals_and_noise_marks_where_uncertainty_is_known(tmp_path, monkeypatch):
    from shiftbench.report import build as build_mod
    from shiftbench.results.store import Store

    spec = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
            "shifts": ["clean", {"name": "_test_noise", "severities": [2, 4]}], "metrics": ["top1"], "batch_size": 10}
    sb.evaluate(spec, store=tmp_path / "r.db")
    monkeypatch.setattr(build_mod, "Uncertainty", _FakeUncertainty)
    monkeypatch.setattr(Store, "samples", lambda self, run_id: [{"model": "m", "dataset": "d", "shift": "clean", "params": {},
                                                                 "severity": 0, "metric": "top1"}], raising=False)
    html = build_report(tmp_path / "r.db", tmp_path / "out").read_text()
    # headline: the aggregate's value, CI line and noise mark; the call resamples the shift's two severities
    assert "25.0 (-1.0) ≈<small>[20.0, 30.0]</small>" in html
    assert _FakeUncertainty.calls == [("dummy_classifier", "top1", ("_test_noise", "_test_noise"))]
    # results cells: CI, change CI and test in the tooltip, the mark in the text
    assert re.search(r'class="noise" title="n = 20 samples per condition; 95% CI \[[0-9.]+, [0-9.]+\]; change 95% CI '
                     r'\[-10.0, \+10.0\] \(paired test\); p = 0.5 against clean \(paired test; uncorrected for multiplicity\); '
                     r'≈ within noise \(p &gt;= 0.05\)">[0-9.]+ \([-+][0-9.]+\) ≈<', html)


def test_models_compared_pairwise_on_the_same_samples(demo_like):
    """The headline's model comparison: each model minus the first on the same images, its CI holding the
    difference, and the clean difference equal to the difference of the stored clean values."""
    from shiftbench.report.headline import headline
    from shiftbench.report.stats import Uncertainty
    from shiftbench.report.tables import build_tables
    from shiftbench.results.records import load

    run, = load(demo_like["store"], demo_like["runs"][0], ("results", "samples"))
    rows, samples = run.rows, run.samples
    tables = build_tables([r for r in rows if "[" not in r.metric], ["top1", "ece"])
    h = headline(rows, tables, ["top1", "ece"], Uncertainty(samples, seed=0))
    pairs = h.pairs
    models = tables[0].models
    assert pairs.base == models[0] and [r.label for r in pairs.rows] == [f"{m} − {models[0]}" for m in models[1:]]
    assert pairs.heads[0] == "clean"
    clean = {r.model: r.value for r in rows if r.metric == "top1" and r.shift == "clean"}
    for model, line in zip(models[1:], pairs.rows):
        diff = 100 * (clean[model] - clean[models[0]])
        assert line.cells[0].text.split()[0] == f"{diff:+.1f}"
        low, high = (float(x) for x in line.cells[0].ci.strip("[]").split(","))
        assert low <= round(diff, 1) <= high
        assert ("≈" in line.cells[0].text) == (low <= 0 <= high)
    # without per-sample values there is no comparison (and no made-up interval)
    assert headline(rows, tables, ["top1", "ece"], None).pairs is None


def test_report_bytes_are_reproducible(demo_like, tmp_path):
    """The bootstrap is seeded by the run: building the report again gives the same bytes, CIs included."""
    again = build_report(demo_like["store"], tmp_path / "again", run_id=demo_like["runs"])
    assert again.read_bytes() == demo_like["html"].read_bytes()
    assert "95% CI [" in again.read_text(encoding="utf-8")
    for name in ("run1_tables.csv", "run1_tables.md", "run2_retrieval.md"):
        assert (tmp_path / "again" / name).read_bytes() == (demo_like["html"].parent / name).read_bytes(), name
