"""shiftbench leaderboard: stores made by real CLI runs, one row per (model, weights), runs that are not comparable
in tables of their own with the line that says why, ranking with ties within noise (the report's paired test as the
oracle), escaped data strings, and a page whose columns sort on a click in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shiftbench.cli import main
from shiftbench.errors import ShiftbenchError
from shiftbench.report.leaderboard import MD_MARK, leaderboard, to_html, to_markdown, write_leaderboard
from shiftbench.report.stats import Uncertainty
from shiftbench.results.store import Condition, Store

EVIL = "<script>window.pwned=1</script>"
SPEC = ("dataset: objects\nmodels: {models}\nmetrics: [top1]\nlimit: 4\nseed: 0\n"
        "shifts: [clean, {{name: gaussian_noise, severities: [1, 3]}}]\n")


def _evaluate(spec: Path, store: Path, *extra: str) -> None:
    assert main(["evaluate", "--config", str(spec), "--store", str(store), *extra]) == 0


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """a.db: dummy_classifier and its seed 2; b.db: dummy_classifier and its seed 1 on the same data and
    conditions, plus an extra run of 3 images, not 4 (all through `shiftbench evaluate`)."""
    tmp = tmp_path_factory.mktemp("leaderboard")
    a, b = tmp / "a.yaml", tmp / "b.yaml"
    a.write_text(SPEC.format(models="[dummy_classifier, {name: dummy_classifier, params: {seed: 2}}]"))
    b.write_text(SPEC.format(models="[dummy_classifier, {name: dummy_classifier, params: {seed: 1}}]"))
    _evaluate(a, tmp / "a.db")
    _evaluate(b, tmp / "b.db")
    _evaluate(b, tmp / "b.db", "--limit", "3")
    return {"a": tmp / "a.db", "b": tmp / "b.db", "tmp": tmp}


def test_rows_merge_per_model_and_weights_and_other_data_gets_its_own_table(stores):
    a, b = str(stores["a"]), str(stores["b"])
    board = leaderboard([a, b])
    assert len(board["tables"]) == 2 and board["left_out"] == []
    first, extra = board["tables"]
    # dummy_classifier ran in both stores with the same (no) weights and params: one row; its seeds 1 and 2 are
    # other models under the same registered name, each a row of its own
    assert sorted((r["model"], r["weights"]) for r in first["rows"]) == [
        ("dummy_classifier", "none"), ("dummy_classifier(seed=1)", "none (seed=1)"),
        ("dummy_classifier(seed=2)", "none (seed=2)")]
    assert len(first["sources"]) == 2 and {s.split(" ")[0] for s in first["sources"]} == {a, b}
    merged = next(r for r in first["rows"] if r["model"] == "dummy_classifier")
    assert merged["run"].startswith(b)  # the latest run's numbers
    assert len(first["also"]) == 1
    assert first["also"][0].startswith("dummy_classifier (weights none): also measured by " + a)
    assert "the same clean top1" in first["also"][0]
    assert first["differs"] is None and first["title"].startswith("objects, 4 samples, top1 (%), 3 conditions")
    # the extra run (3 images) is not comparable: its own table, and one line naming what differs and against what
    assert sorted(r["model"] for r in extra["rows"]) == ["dummy_classifier", "dummy_classifier(seed=1)"]
    assert extra["differs"].startswith(f"{b} run-")
    assert "dataset 'objects' fingerprint differs (4 → 3 samples)" in extra["differs"]
    assert extra["differs"].endswith("(table 1)") and f"against {a} run-" in extra["differs"]
    # every row carries n and its cells their 95% CI (the report's bootstrap)
    for t in board["tables"]:
        assert [c["key"] for c in t["head"]][:5] == ["rank", "model", "weights", "n", "clean"]
        assert all(r["n"] == (4 if t is first else 3) for r in t["rows"])
        assert all(r["cells"][4]["ci"].startswith("[") for r in t["rows"])


def test_the_command_prints_the_table_and_writes_markdown_and_html(stores, capsys):
    out = stores["tmp"] / "board"
    a, b = str(stores["a"]), str(stores["b"])
    assert main(["leaderboard", a, b, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| rank | model | weights | n | top1 (%) | corruptions: mean of 1 corruption |" in printed
    assert "Not comparable with table 1: " in printed and "(4 → 3 samples)" in printed
    md = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert md.startswith(MD_MARK) and md[len(MD_MARK) + 1:] in printed
    assert "<table class=\"leaderboard\"" in (out / "leaderboard.html").read_text(encoding="utf-8")
    # a second call replaces its own files; a file it did not write is never replaced
    assert main(["leaderboard", a, "--out", str(out)]) == 0
    capsys.readouterr()
    foreign = stores["tmp"] / "foreign"
    foreign.mkdir()
    (foreign / "leaderboard.md").write_text("my notes\n")
    assert main(["leaderboard", a, "--out", str(foreign)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no earlier shiftbench leaderboard wrote" in err[0]
    assert (foreign / "leaderboard.md").read_text() == "my notes\n" and not (foreign / "leaderboard.html").exists()
    # a column no run has: one line with the close names and the columns there are
    assert main(["leaderboard", a, "--by", "corruption"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'corruptions'" in err[0]
    assert "Columns: breaks-at, clean, corruptions" in err[0]
    assert main(["leaderboard", str(stores["tmp"] / "none.db")]) == 2
    assert "store not found" in capsys.readouterr().err


# -- ranking and ties: stores whose per-sample values are chosen --------------------------------------------
IDS = [f"s{i:02d}" for i in range(40)]
CONDITIONS = [("clean", 0), ("gaussian_noise", 3), ("gaussian_noise", 5), ("fog", 3)]


def _right(k: int) -> np.ndarray:
    """The first k of the 40 samples right, the others wrong."""
    return (np.arange(len(IDS)) < k).astype(np.float64)


def _store(path: Path, name: str, models: dict[str, tuple[str, dict[str, int]]],
           clean_values: dict[str, float] | None = None) -> Path:
    """A store with one finished run: per model (label) its weights digest and how many of the 40 samples it gets
    right on clean and under the corruptions (``{"clean": 36, "corrupted": 10}``); ``clean_values``: a model's
    stored clean value, when not the mean of those samples."""
    spec = {"name": name, "dataset": "synthetic", "models": [{"name": m, "params": {}} for m in models],
            "metrics": ["top1"], "seed": 0,
            "shifts": [{"name": "clean", "params": {}, "severities": [0]},
                       {"name": "gaussian_noise", "params": {}, "severities": [3, 5]},
                       {"name": "fog", "params": {}, "severities": [3]}]}
    identity = {"shiftbench": "0.1.0", "ids": None,
                "dataset": {"name": "synthetic", "samples": len(IDS), "sample_ids": "0" * 64},
                "models": {m: {"weights": w, "from": "files", "files": ["w.pth"]} for m, (w, _) in models.items()}}
    with Store(path) as store:
        run = store.start_run(spec, seed=0, identity=identity, name=name)
        for label, (_, right) in models.items():
            for shift, severity in CONDITIONS:
                values = _right(right["clean" if shift == "clean" else "corrupted"])
                cid = store.condition(run, Condition(label, "synthetic", shift, {}, severity))
                value = (clean_values or {}).get(label) if shift == "clean" else None
                store.finish_condition(cid, {"top1": (float(values.mean()) if value is None else value, len(IDS))},
                                       samples={"top1": ("mean", IDS, values)})
        store.finish_run(run)
    return path


@pytest.fixture(scope="module")
def chosen(tmp_path_factory) -> list[str]:
    """Two stores of comparable runs: alpha and beta one sample apart on clean (within noise), and two models
    named resnet50 with other weights, 8 samples apart (not within noise)."""
    tmp = tmp_path_factory.mktemp("chosen")
    one = _store(tmp / "one.db", "first", {"alpha": ("a" * 64, {"clean": 36, "corrupted": 10}),
                                            "resnet50": ("c" * 64, {"clean": 12, "corrupted": 12})})
    two = _store(tmp / "two.db", "second", {"beta": ("b" * 64, {"clean": 35, "corrupted": 20}),
                                            "resnet50": ("d" * 64, {"clean": 20, "corrupted": 18})})
    return [str(one), str(two)]


def _oracle(stores: list[str], models: list[tuple[str, str]], conditions: list[tuple]) -> list[bool]:
    """The report's paired test (report.stats), on the same samples, of each ranked model against the one above."""
    samples = []
    for path in stores:
        with Store(path, create=False) as db:
            run = db.run()
            weights = {m: v["weights"] for m, v in run["identity"]["models"].items()}
            samples += [{**s, "model": (s["model"], weights[s["model"]][:12])} for s in db.samples(run["run_id"])]
    unc = Uncertainty([{**s, "model": f"{s['model'][0]}@{s['model'][1]}"} for s in samples], seed=0)
    keys = [f"{m}@{w}" for m, w in models]
    return [bool(unc.compare(above, below, "top1", conditions)["noise"]) for above, below in zip(keys, keys[1:])]


def test_same_name_other_weights_is_two_rows_ranked_with_ties_within_noise(chosen):
    board = leaderboard(chosen)
    (table,) = board["tables"]
    rows = table["rows"]
    assert [(r["model"], r["weights"]) for r in rows] == [("alpha", "a" * 12), ("beta", "b" * 12),
                                                          ("resnet50", "d" * 12), ("resnet50", "c" * 12)]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4] and board["by"] == "clean"
    ties = [r["tie"] is not None for r in rows[1:]]
    assert ties == [True, False, False]
    assert ties == _oracle(chosen, [(r["model"], r["weights"]) for r in rows], [("clean", {}, 0)])
    assert "exact McNemar" in rows[1]["tie"] and rows[1]["cells"][0]["text"] == "2 ≈"
    assert table["rows"][0]["cells"][4]["text"] == "90.0" and table["rows"][0]["cells"][4]["ci"]
    # by the corruptions' mean: its own order, ties from the paired bootstrap over the three conditions
    board = leaderboard(chosen, by="corruptions")
    rows = board["tables"][0]["rows"]
    assert [r["model"] + r["weights"][0] for r in rows] == ["betab", "resnet50d", "resnet50c", "alphaa"]
    corrupted = [("gaussian_noise", {}, 3), ("gaussian_noise", {}, 5), ("fog", {}, 3)]
    assert [r["tie"] is not None for r in rows[1:]] == _oracle(chosen, [(r["model"], r["weights"]) for r in rows],
                                                               corrupted)
    # "breaks at" ranks the latest failure first ("never" before any severity)
    board = leaderboard(chosen, by="breaks at")
    assert board["by"] == "breaks-at"
    texts = [r["cells"][next(i for i, c in enumerate(board["tables"][0]["head"]) if c["key"] == "breaks-at")]["text"]
             for r in board["tables"][0]["rows"]]
    assert texts[0] == "never" and texts[-1] != "never"
    with pytest.raises(ShiftbenchError, match="--by 'mixed_same' is no column"):
        leaderboard(chosen, by="mixed_same")


def test_ranked_on_the_numbers_not_their_rounded_text(tmp_path):
    """Issue 37: two models both shown as 50.0 on clean rank by their numbers (before, by their rounded text:
    equal, then by name); the cells still show 50.0, the page sorts them by the 50.0 it shows, and the paired
    test (the same right/wrong values) still marks the second within noise of the first."""
    store = _store(tmp_path / "close.db", "close", {"m_a": ("a" * 64, {"clean": 20, "corrupted": 10}),
                                                  "m_b": ("b" * 64, {"clean": 20, "corrupted": 10})},
                   clean_values={"m_a": 0.50001, "m_b": 0.50004})
    rows = leaderboard([str(store)])["tables"][0]["rows"]
    assert [r["model"] for r in rows] == ["m_b", "m_a"]
    assert [(r["cells"][4]["text"], r["cells"][4]["sort"]) for r in rows] == [("50.0", "50.0")] * 2
    assert rows[1]["tie"] and "exact McNemar" in rows[1]["tie"]


def test_bg_gap_ties_on_the_intervals_numbers():
    """Two BG-Gap intervals that touch only once rounded for display are not within noise; overlapping ones are."""
    from dataclasses import replace

    from shiftbench.report.headline import GapCell
    from shiftbench.report.leaderboard import _tie

    above = GapCell(0.03, 0.0203, 0.04, 8, percent=True, same=0.5, rand=0.47)
    below = GapCell(0.01, 0.0, 0.0197, 8, percent=True, same=0.5, rand=0.49)
    assert (above.ci, below.ci) == ("[+2.0, +4.0]", "[+0.0, +2.0]")  # the text touches, the numbers do not
    assert _tie(None, "bg-gap", None, 0, {"cells": [above]}, {"cells": [below]}) is None
    tie = _tie(None, "bg-gap", None, 0, {"cells": [above]}, {"cells": [replace(below, high=0.0203)]})
    assert tie == "within noise of the row above: the 95% CIs of their BG-Gaps overlap ([+2.0, +4.0] and [+0.0, +2.0])"


# -- escaping and the page in a browser ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A store named with markup, a run named with a script and a model whose label holds one."""
    tmp = tmp_path_factory.mktemp("hostile")
    spec = tmp / "evil.yaml"
    spec.write_text(f'name: "run {EVIL}"\ndataset: objects\nlimit: 3\nmetrics: [top1]\nshifts: [clean]\n'
                    f'models: [dummy_classifier, {{name: dummy_classifier, params: {{dtype: "{EVIL}"}}}}]\n')
    _evaluate(spec, tmp / "<b>evil.db")
    return tmp / "<b>evil.db"


def test_every_data_string_is_escaped(hostile):
    board = leaderboard([str(hostile)])
    models = [r["model"] for r in board["tables"][0]["rows"]]
    assert f"dummy_classifier(dtype={EVIL})" in models  # the data keeps the name as it is
    html = to_html(board)
    assert EVIL not in html and "<b>evil" not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html and "&lt;b&gt;evil.db" in html
    assert "http://" not in html and "https://" not in html  # self-contained
    md = to_markdown(board)
    assert EVIL not in md and "<b>" not in md and "&lt;script>window.pwned=1&lt;/script>" in md


def _chromium_page(p, html_path: Path, requests: list[str]):
    from test_report import _chromium  # the report test's browser: Debian's chromium, required

    browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html_path.as_uri())
    page.wait_for_load_state("load")
    return browser, page


def _order(page) -> list[str]:
    return page.evaluate("""Array.from(document.querySelectorAll('table.leaderboard tbody tr'))
                              .map(tr => tr.cells[1].textContent + ' ' + tr.cells[2].textContent)""")


def test_clicking_a_header_resorts_the_rows_in_headless_chromium(chosen, hostile, tmp_path):
    from playwright.sync_api import sync_playwright

    md, html = write_leaderboard(leaderboard(chosen), tmp_path / "board")
    evil_html = write_leaderboard(leaderboard([str(hostile)]), tmp_path / "evil")[1]
    requests: list[str] = []
    with sync_playwright() as p:
        browser, page = _chromium_page(p, html, requests)
        assert _order(page) == ["alpha aaaaaaaaaaaa", "beta bbbbbbbbbbbb", "resnet50 dddddddddddd",
                                "resnet50 cccccccccccc"]
        head = page.locator("table.leaderboard thead th[data-key='corruptions']")
        head.click()  # better first: the highest mean under the corruptions
        assert _order(page) == ["beta bbbbbbbbbbbb", "resnet50 dddddddddddd", "resnet50 cccccccccccc",
                                "alpha aaaaaaaaaaaa"]
        assert head.get_attribute("aria-sort") == "descending"
        head.click()  # again: reversed
        assert _order(page)[0] == "alpha aaaaaaaaaaaa" and head.get_attribute("aria-sort") == "ascending"
        page.locator("table.leaderboard thead th[data-key='weights']").click()  # text: a to z
        assert [o.split(" ")[1][0] for o in _order(page)] == ["a", "b", "c", "d"]
        page.locator("table.leaderboard thead th[data-key='rank']").click()
        assert _order(page)[:2] == ["alpha aaaaaaaaaaaa", "beta bbbbbbbbbbbb"]
        assert "2 ≈" in page.inner_text("table.leaderboard tbody")
        browser.close()
        browser, page = _chromium_page(p, evil_html, requests)
        assert page.evaluate("typeof window.pwned") == "undefined"
        assert EVIL in page.inner_text("body")  # shown as text, never run
        page.locator("table.leaderboard thead th[data-key='model']").click()
        assert page.evaluate("typeof window.pwned") == "undefined"
        browser.close()
    assert requests and all(u.startswith("file://") for u in requests), requests


def test_module_doctests():
    import doctest

    import shiftbench.report.leaderboard as module

    assert doctest.testmod(module).failed == 0


def test_an_unfinished_run_is_left_out_with_a_line(chosen, tmp_path):
    with Store(tmp_path / "killed.db") as store:
        run = store.start_run({"name": "killed", "dataset": "synthetic"}, seed=0)  # never finished
        for shift, severity in CONDITIONS:  # killed after its first condition
            cid = store.condition(run, Condition("alpha", "synthetic", shift, {}, severity))
            if shift == "clean":
                store.finish_condition(cid, {"top1": (0.5, len(IDS))}, samples={"top1": ("mean", IDS, _right(20))})
    board = leaderboard([*chosen, str(tmp_path / "killed.db")])
    assert len(board["tables"]) == 1 and len(board["left_out"]) == 1
    assert board["left_out"][0].endswith("not finished (status running: killed, or still running): 3 of 4 "
                                         "conditions unfinished: left out")
    assert "## Left out" in to_markdown(board)
    with pytest.raises(ShiftbenchError, match="no finished run with results"):
        leaderboard([str(tmp_path / "killed.db")])
