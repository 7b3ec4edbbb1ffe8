"""The promises of ``shiftbench export`` (all three formats) and ``shiftbench leaderboard`` on names, ids and runs we
did not make (issue 36): any name a store accepts exports, with bounded, portable file names that stay distinct on a
case-insensitive file system and the full name kept in the files; a number that is not what its label says gets a
note (a run on a folder written by generate, a run not finished, a value that is not finite, metrics without
per-sample values and why) or is refused naming the store, run and condition; a name reaches Markdown as text,
never markup; an empty ``--out`` is one ``error:`` line and exit status 2; nothing is written outside ``--out``."""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from shiftbench.cli import main
from shiftbench.errors import ShiftbenchError, StoreError
from shiftbench.files import file_stem, file_stems
from shiftbench.report import build_report
from shiftbench.report import export as ex
from shiftbench.report.blocks import blocks_to_markdown, markdown_plain, markdown_text
from shiftbench.report.leaderboard import leaderboard, write_leaderboard
from shiftbench.results.store import Condition, Store

IDS = [f"s{i}" for i in range(8)]
RIGHT = (np.arange(8) < 5).astype(np.float64)
# any character a store holds (SQLite text is UTF-8: no lone surrogates): control characters, NUL, '/', '\\',
# line breaks, markup, wide characters and emoji
NAME = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=1000)
SHORT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=300)
PORTABLE = re.compile(r"^[A-Za-z0-9._-]+$")
WINDOWS_DEVICES = re.compile(r"(?i)^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])(\..*)?$")
MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")  # GitHub's Markdown, as far as it renders


def props(n: int):
    """``n`` generated cases, the same ones every run (derandomize), no clock (no deadline)."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def fresh(tmp_path: Path) -> Path:
    """A new empty folder for one example (Hypothesis reuses the function's tmp_path)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def write_run(db: Path, model: str = "m", run_id: str | None = None, dataset: str = "objects", *,
              models: tuple[str, ...] | None = None, value: float = 0.625, values: np.ndarray = RIGHT,
              identity: dict | None = None, finish: bool = True, pending: int = 0, samples: bool = True,
              metric: str = "top1", spec: dict | None = None,
              conditions: tuple = (("clean", 0), ("gaussian_noise", 1), ("gaussian_noise", 3))) -> str:
    """One run as evaluate leaves it: each model under ``conditions``, ``metric`` with per-sample values;
    ``pending`` conditions created and never finished, the run left running unless ``finish``."""
    models = models or (model,)
    with Store(db) as store:
        run = store.start_run(spec or {"dataset": dataset, "models": list(models), "metrics": [metric]}, seed=0,
                              run_id=run_id, identity=identity)
        for label in models:
            for shift, severity in conditions:
                cid = store.condition(run, Condition(label, dataset, shift, {}, severity))
                store.finish_condition(cid, {metric: (value, len(IDS), {"higher_is_better": True, "metric": metric})},
                                       samples={metric: ("mean", IDS, values)} if samples else None)
            for k in range(pending):
                store.condition(run, Condition(label, dataset, "fog", {}, k + 1))
        if finish:
            store.finish_run(run)
    return run


def listing(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_names(out: Path) -> list[str]:
    """Every file and folder name under ``out``: portable (ASCII letters, digits, '.', '_', '-'; never a Windows
    device name), at most 255 bytes, distinct from its siblings once case is folded. Returns the files."""
    for here, dirs, files in os.walk(out):
        names = dirs + files
        folded = [n.casefold() for n in names]
        assert len(set(folded)) == len(folded), f"names that differ only by case in {here}: {sorted(names)}"
        for name in names:
            assert len(name.encode("utf-8")) <= 255 and "/" not in name and "\\" not in name
            assert PORTABLE.match(name) and not WINDOWS_DEVICES.match(name), name
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


def export_all(db: Path, place: Path, **kw) -> dict[str, ex.Export]:
    """The store exported in every format, each into its own folder of ``place``; nothing else in ``place``
    changes (the store's folder is ``db.parent``, checked by the caller)."""
    done = {}
    for fmt in ex.FORMATS:
        done[fmt] = ex.export_store(db, place / fmt, fmt, **kw)
    return done


def record_names(out: Path) -> dict[str, dict]:
    return json.loads((out / ex.EXPORT_RECORD).read_text(encoding="utf-8"))["names"]


def strict_json(text: str):
    """JSON as the standard reads it: NaN and Infinity are no JSON."""
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON")
    return json.loads(text, parse_constant=refuse)


class _Cells(HTMLParser):
    """The text of each table cell, heading, paragraph and list item of rendered Markdown, and any other tag."""

    BLOCKS = ("h1", "h2", "h3", "p", "li", "td", "th")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: list[tuple[str, str]] = []
        self.other: list[str] = []
        self._buf: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCKS:
            self._buf = []
        elif tag not in ("ul", "table", "thead", "tbody", "tr", "strong"):
            self.other.append(tag)

    def handle_endtag(self, tag):
        if tag in self.BLOCKS and self._buf is not None:
            self.texts.append((tag, "".join(self._buf)))
            self._buf = None

    def handle_data(self, data):
        if self._buf is not None:
            self._buf.append(data)


def rendered(markdown: str) -> _Cells:
    parser = _Cells()
    parser.feed(MD.render(markdown))
    return parser


def shown(name: str) -> str:
    """What Markdown must render for ``name``: its words on one line, control characters as \\xNN."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", " ".join(name.split()))


# -- names and ids of any length and alphabet --------------------------------------------------------------------

@props(100)
@given(model=NAME, run_id=NAME, dataset=SHORT)
@example(model="🐈" * 300, run_id="/" * 1000, dataset="CON")  # 1,200 bytes; only separators; a device name
@example(model="..", run_id=".", dataset="")
@example(model="a\x00b\n<b>c</b>", run_id="nul.txt", dataset="x" * 300)
def test_any_name_a_store_accepts_exports_in_every_format_and_ranks(tmp_path, model, run_id, dataset):
    """promise: any name a store accepts exports (every format) and ranks on the leaderboard: file names
    bounded (<= 255 bytes), portable, free of separators and device names; the full names kept in the files;
    nothing written outside --out."""
    place = fresh(tmp_path)
    db = place / "store" / "r.db"
    db.parent.mkdir()
    rid = write_run(db, model, run_id, dataset)
    assert rid == run_id
    store_before = listing(db.parent)
    done = export_all(db, place / "out")
    assert sorted(p.name for p in place.iterdir()) == ["out", "store"] and listing(db.parent) == store_before
    for fmt, result in done.items():
        files = check_names(place / "out" / fmt)
        assert set(result.files) <= set(files) and result.runs == [rid]
    # the names, whole, inside the files
    (name,) = done["results"].files
    doc = strict_json((place / "out/results" / name).read_text(encoding="utf-8"))
    assert doc["run"]["run_id"] == rid and {(r["model"], r["dataset"]) for r in doc["rows"]} == {(model, dataset)}
    assert record_names(place / "out/results") == {name: {"run": rid}}
    conditions = [strict_json(x) for x in
                  (place / "out/jsonl/conditions.jsonl").read_text(encoding="utf-8").splitlines()]
    lines = [strict_json(x) for x in (place / "out/jsonl/samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {(x["run"], x["model"], x["dataset"]) for x in conditions} == {(rid, model, dataset)} and len(lines) == 24
    assert {x["condition"] for x in lines} <= {x["condition"] for x in conditions}
    table = pq.read_table(place / "out/parquet/samples.parquet").select(["run", "model", "dataset"]).to_pylist()
    assert {(x["run"], x["model"], x["dataset"]) for x in table} == {(rid, model, dataset)} and len(table) == 24
    behind = record_names(place / "out/robustbench")
    (info_name,) = [f for f in done["robustbench"].files if f.endswith(".json")]
    info = strict_json((place / "out/robustbench" / info_name).read_text(encoding="utf-8"))
    assert info["name"] == model and behind[info_name] == {"run": rid, "dataset": dataset, "model": model}
    assert info["dataset"] == info_name.split("/")[1] == file_stem(dataset)
    # the leaderboard: the names as they are in its data, its files in --out only, the label a cell of its Markdown
    board = leaderboard([str(db)])
    assert [r["model"] for r in board["tables"][0]["rows"]] == [model]
    md, page = write_leaderboard(board, place / "board")
    assert sorted(p.name for p in (place / "board").iterdir()) == ["leaderboard.html", "leaderboard.md"]
    assert listing(db.parent) == store_before
    cells = [t for tag, t in rendered(md.read_text(encoding="utf-8")).texts if tag == "td"]
    assert cells[1] == shown(model) and rendered(md.read_text(encoding="utf-8")).other == []


def _case_pairs():
    # a name and the same name in other case (upper, lower, swapped, or only its first letter changed)
    def variants(name):
        found = {name.upper(), name.lower(), name.swapcase(), name[:1].swapcase() + name[1:]} - {name}
        return st.sampled_from(sorted(found)) if found else st.nothing()
    return NAME.filter(lambda n: n.swapcase() != n).flatmap(lambda n: st.tuples(st.just(n), variants(n)))


@props(60)
@given(pair=_case_pairs(), dataset_pair=_case_pairs())
@example(pair=("Ab" * 300, "aB" * 300), dataset_pair=("Objects", "objects"))  # long, and cut to one slug
def test_names_that_differ_only_by_case_never_share_a_file(tmp_path, pair, dataset_pair):
    """promise: names that differ only by case (two models, two runs, two datasets) export to files that stay
    apart on a case-insensitive file system, each name kept whole in the files."""
    a, b = pair
    place = fresh(tmp_path)
    db = place / "r.db"
    first = write_run(db, run_id=a, dataset=dataset_pair[0], models=(a, b))
    second = write_run(db, run_id=b, dataset=dataset_pair[1], models=(a, b), spec={"other": True})
    done = export_all(db, place / "out", all_runs=True)
    assert sorted(p.name for p in place.iterdir()) == ["out", "r.db"]  # nothing beside --out
    for fmt in ex.FORMATS:
        check_names(place / "out" / fmt)
    results = {strict_json((place / "out/results" / f).read_text(encoding="utf-8"))["run"]["run_id"]
               for f in done["results"].files}
    assert results == {first, second}
    behind = record_names(place / "out/robustbench")
    infos = {(v["run"], v["dataset"], v["model"]) for f, v in behind.items() if f.endswith(".json")}
    assert infos == {(r, d, m) for r, d in ((first, dataset_pair[0]), (second, dataset_pair[1])) for m in (a, b)}
    for f, v in behind.items():
        if f.endswith(".json"):
            assert strict_json((place / "out/robustbench" / f).read_text(encoding="utf-8"))["name"] == v["model"]
    stems = file_stems([a, b])
    assert stems[a].casefold() != stems[b].casefold()
    board = leaderboard([str(db)])
    assert sorted(r["model"] for t in board["tables"] for r in t["rows"]) == sorted([a, a, b, b])


def test_file_stems_are_bounded_portable_and_stable():
    """promise: a file name from a name is bounded, portable and the same whatever order the names come in."""
    odd = ["", ".", "..", "CON", "con.txt", "Nul", "lpt1", "a/b", "a\\b", "a\x00b", "x" * 1000, "é" * 300, "-rf",
           ".hidden", "ab", "AB", "aB", "Ab-" + file_stem("Ab", hashed=True)[3:]]
    stems = file_stems(odd)
    assert file_stems(reversed(odd)) == stems
    assert len({s.casefold() for s in stems.values()}) == len(odd)
    for name, stem in stems.items():
        assert PORTABLE.match(stem) and len(stem) <= 80 and not WINDOWS_DEVICES.match(stem), (name, stem)
        assert not stem.startswith(("-", ".")), stem
    assert stems["ab"] != "ab" and stems["AB"] != "AB"  # spellings of one word: each with its hash
    assert file_stems(["efficientnet_lite0", "m_a"]) == {"efficientnet_lite0": "efficientnet_lite0", "m_a": "m_a"}


# -- Markdown: a name is text, never markup ------------------------------------------------------------------------

@props(1000)
@given(name=NAME)
def test_a_name_renders_as_itself_in_every_markdown_block(name):
    """promise: every data string that reaches Markdown (a heading, a paragraph, a list item, a table cell) renders
    as exactly that text: no tag, link, emphasis, code or list comes out of a model label."""
    text = shown(name)
    doc = blocks_to_markdown([{"kind": "heading", "level": 2, "text": name}, {"kind": "text", "text": name},
                              {"kind": "list", "items": [name, "x"]},
                              {"kind": "table", "head": ["h", name], "rows": [[name, "y"]]}])
    got = rendered(doc)
    assert got.other == [], (name, doc)
    want = [("h2", text), ("p", text), ("li", text), ("li", "x"), ("th", "h"), ("th", text), ("td", text), ("td", "y")]
    assert got.texts == [w for w in want if w[1] or w[0] in ("td", "th", "li")] or not text, (name, doc)
    assert markdown_plain(markdown_text(" ".join(name.split()), table=True)) == " ".join(name.split()) or \
        re.search(r"[\x00-\x1f\x7f-\x9f]", name)


EVIL = ("<img src=x onerror=alert(1)> **bold** `code` [link](http://e) | pipe\nline & &amp; _x_ ~~gone~~ "
        "# 1. - > <!-- c -->")


def test_the_reports_and_leaderboards_markdown_show_a_hostile_label_literally(tmp_path):
    """promise: the report's and the leaderboard's Markdown files show a hostile model label as text (the
    leaderboard's HTML already escapes it)."""
    db = tmp_path / "r.db"
    write_run(db, EVIL)
    md, _ = write_leaderboard(leaderboard([str(db)]), tmp_path / "board")
    build_report(db, tmp_path / "report")
    for path in (md, tmp_path / "report" / "tables.md"):
        got = rendered(path.read_text(encoding="utf-8"))
        assert got.other == [], (path.name, got.other)
        assert shown(EVIL) in [t for _, t in got.texts], path.name


# -- numbers that are not what their label says ---------------------------------------------------------------------

GENERATED = {"name": "gen/gaussian_noise/3", "samples": 8, "sample_ids": "0" * 64,
             "generated": {"shift": "gaussian_noise", "severity": 3, "params": {}, "seed": 0, "source": "objects",
                           "complete": True}}


def test_a_run_on_a_generated_folder_never_exports_a_clean_acc(tmp_path):
    """promise: nothing silently wrong: a run on a folder written by shiftbench generate has no clean images, so
    RobustBench's clean_acc is omitted (its top1 is the cell of the corruption the folder was made under, the
    shifts on top left out), each said in a note and the entry's footnote; results label the baseline."""
    db = tmp_path / "g.db"
    rid = write_run(db, dataset=GENERATED["name"],
                    identity={"dataset": GENERATED, "models": {"m": {"weights": None, "from": "none"}}},
                    conditions=(("clean", 0), ("fog", 1), ("fog", 3)), value=0.5)
    done = export_all(db, tmp_path / "out")
    folder = tmp_path / "out/robustbench/model_info" / file_stem("gen/gaussian_noise/3") / "corruptions"
    info = strict_json((folder / "m.json").read_text())
    assert "clean_acc" not in info and "generate" in info["footnote"] and "not on clean images" in info["footnote"]
    jsonschema.Draft202012Validator(ex.schema("robustbench")).validate(info)
    assert (folder / "unaggregated_results.csv").read_text().splitlines() == [",gaussian_noise", ",3", "m,0.5"]
    notes = done["robustbench"].notes
    assert any("clean_acc omitted" in n and "not clean ones" in n and "gaussian_noise s3 cell" in n for n in notes)
    assert any("fog applied on top of those generated images left out" in n for n in notes)
    for fmt in ("results", "jsonl"):
        assert any(f"run {rid}: its data is a folder written by shiftbench generate under gaussian_noise at "
                   "severity 3" in n for n in done[fmt].notes), fmt
    doc = strict_json((tmp_path / "out/results" / f"{rid}.json").read_text())
    assert doc["baseline"] == "gaussian_noise s3 (generated)" and any("generate" in n for n in doc["notes"])
    # the leaderboard: the column, the ranking and the note name what the images are
    table = leaderboard([str(db)])["tables"][0]
    assert table["head"][4]["group"] == "gaussian_noise s3 (generated)"
    assert "Ranked by gaussian_noise s3 (generated) top1" in table["note"]
    assert "The data of these runs is a folder written by shiftbench generate" in table["note"]


def test_a_real_generated_folder_through_the_cli(tmp_path, capsys, monkeypatch):
    """promise: nothing silently wrong, end to end: generate, evaluate on its output, export: a note, no clean_acc."""
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--dataset", "objects", "--shift", "gaussian_noise", "--severity", "3", "--limit", "3",
                 "--out", "gen"]) == 0
    classes = sorted(p.name for p in (tmp_path / "gen/gaussian_noise/3").iterdir())
    Path("spec.yaml").write_text("dataset: gen/gaussian_noise/3\nmetrics: [top1]\nshifts: [clean]\n"
                                 f"models: [{{name: dummy_classifier, params: {{label_space: {classes}}}}}]\n")
    assert main(["evaluate", "--config", "spec.yaml", "--store", "g.db"]) == 0
    capsys.readouterr()
    assert main(["export", "--store", "g.db", "--format", "robustbench", "--out", "rb"]) == 0
    err = capsys.readouterr().err
    assert ("clean_acc omitted: what the run read unshifted are images generate made under gaussian_noise s3, not "
            "clean ones; their top1 is written as its gaussian_noise s3 cell") in err
    (info,) = Path("rb/model_info").rglob("*.json")
    assert "clean_acc" not in strict_json(info.read_text())


def test_an_unfinished_run_is_said_in_every_format_and_left_off_the_leaderboard(tmp_path):
    """promise: nothing silently wrong: a killed run exports with a note naming it and how many conditions are
    unfinished (and RobustBench's footnote); the leaderboard leaves it out with the same count."""
    db = tmp_path / "k.db"
    rid = write_run(db, finish=False, pending=2)
    done = export_all(db, tmp_path / "out")
    said = f"run {rid}: not finished (status running: killed, or still running): 2 of 5 conditions unfinished"
    for fmt in ex.FORMATS:
        assert any(n.startswith(said) for n in done[fmt].notes), (fmt, done[fmt].notes)
    info = strict_json(next((tmp_path / "out/robustbench").rglob("m.json")).read_text())
    assert info["footnote"].startswith("partial run: not finished")
    doc = strict_json((tmp_path / "out/results" / f"{rid}.json").read_text())
    assert doc["run"]["status"] == "running" and any(n.startswith(said) for n in doc["notes"])
    other = tmp_path / "done.db"
    write_run(other, "n")
    board = leaderboard([str(db), str(other)])
    assert board["left_out"] == [f"{db} {rid}: not finished (status running: killed, or still running): 2 of 5 "
                                 "conditions unfinished: left out"]


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 1.5])
def test_a_value_that_is_no_accuracy_is_never_written_as_one(tmp_path, bad):
    """promise: nothing silently wrong: an infinite, NaN or out-of-range top1 is an empty CSV cell and no
    clean_acc in RobustBench's layout, null in the results JSON (never NaN or Infinity), each with a note."""
    db = tmp_path / "r.db"
    rid = write_run(db, value=bad)
    done = export_all(db, tmp_path / "out")
    for path in (tmp_path / "out").rglob("*"):
        if path.suffix == ".csv":
            assert not re.search(r"(?i)\b(nan|inf)", path.read_text()), path.read_text()
        elif path.suffix in (".json", ".jsonl"):
            for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
                strict_json(line)
    info = strict_json(next((tmp_path / "out/robustbench").rglob("m.json")).read_text())
    assert "clean_acc" not in info
    doc = strict_json((tmp_path / "out/results" / f"{rid}.json").read_text())
    if math.isnan(bad):  # SQLite keeps a NaN as NULL: a row without a value, said as such
        assert [r["value"] for r in doc["rows"]] == [None] * 3
        assert any("clean_acc omitted: no clean top1" in n for n in done["robustbench"].notes)
        return
    assert any("top1 not an accuracy in [0, 1], left out (an empty cell)" in n for n in done["robustbench"].notes)
    if math.isfinite(bad):
        assert [r["value"] for r in doc["rows"]] == [bad] * 3
    else:
        assert [r["value"] for r in doc["rows"]] == [None] * 3
        assert any("3 values are not finite numbers, written as null" in n for n in doc["notes"])


def test_a_non_finite_per_sample_value_is_refused_naming_the_store_run_and_condition(tmp_path, capsys):
    """promise: a user mistake (or a damaged store) is one error line naming the store, the run and the condition:
    a NaN or infinite per-sample value refuses jsonl, parquet, results and the leaderboard (exit status 2)."""
    db = tmp_path / "store with space.db"
    values = RIGHT.copy()
    values[2] = np.nan
    rid = write_run(db, "m\nx", "run/odd", "objects", values=values, conditions=(("clean", 0), ("fog", 3)))
    for call in (lambda: ex.export_store(db, tmp_path / "a", "jsonl"),
                 lambda: ex.export_store(db, tmp_path / "b", "results"),
                 lambda: ex.export_store(db, tmp_path / "e", "parquet"),
                 lambda: leaderboard([str(db)])):
        with pytest.raises(StoreError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"{db}: run {rid!r}: model 'm\\nx', dataset 'objects', clean: ")
        assert "per-sample values of 'top1' are not finite (NaN at sample 's2')" in message
    assert not any((tmp_path / x).exists() for x in "abe")  # the streamed formats too: nothing half-written
    for args in (["export", "--store", str(db), "--format", "results", "--out", str(tmp_path / "c")],
                 ["leaderboard", str(db)]):
        assert main(args) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {db}: run 'run/odd': ") and "fog" not in err[0]
    # RobustBench's layout reads no per-sample value: it exports
    assert ex.export_store(db, tmp_path / "d", "robustbench").files


def test_why_a_run_has_no_per_sample_values_is_said_truly(tmp_path):
    """promise: nothing silently wrong: a run whose metrics keep no per-sample values (detection's AP) is not
    blamed on an older store; a store without their table is; a run with some is told which metrics lack them."""
    identity = {"dataset": {"name": "objects", "samples": 8}, "models": {"m": {"weights": None, "from": "none"}}}
    det = tmp_path / "det.db"
    rid = write_run(det, metric="box_ap", samples=False, identity=identity)
    notes = ex.export_store(det, tmp_path / "a", "results").notes
    assert notes[0] == f"run {rid}: no per-sample values: its metric (box_ap) keeps none: no confidence intervals " \
                       "and no failure points"
    assert not any("older" in n or "before shiftbench" in n for n in notes)
    assert ex.export_store(det, tmp_path / "b", "jsonl").notes[0].endswith("keeps none: no lines")
    assert "no per-sample values: its metric (box_ap) keeps none, so no paired test" in \
        leaderboard([str(det)])["tables"][0]["note"]
    mixed = tmp_path / "mixed.db"
    with Store(mixed) as store:
        run = store.start_run({"dataset": "objects", "models": ["m"]}, seed=0, identity=identity)
        cid = store.condition(run, Condition("m", "objects", "clean", {}, 0))
        store.finish_condition(cid, {"top1": (0.625, 8), "box_ap": (0.5, 8)}, samples={"top1": ("mean", IDS, RIGHT)})
        store.finish_run(run)
    notes = ex.export_store(mixed, tmp_path / "c", "results").notes
    assert notes[0] == f"run {run}: no per-sample values for box_ap: this metric keeps none: their rows have no " \
                       "confidence interval"
    old = tmp_path / "old.db"
    rid = write_run(old, samples=False, identity=identity)
    with sqlite3.connect(old) as con:  # as an older shiftbench left it
        con.execute("DROP TABLE samples")
    con.close()
    assert ex.export_store(old, tmp_path / "d", "results").notes[0] == \
        f"run {rid}: no per-sample values: the store was written by a shiftbench that did not keep them yet: no " \
        "confidence intervals and no failure points"


# -- an empty --out ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out", ["", " ", "\t \n"])
def test_an_empty_out_is_one_error_line_and_exit_2(tmp_path, capsys, monkeypatch, out):
    """promise: a user mistake is one error: line and exit status 2: an empty or blank --out of export,
    leaderboard and report, nothing written (the current folder stays as it was)."""
    db = tmp_path / "store" / "r.db"
    db.parent.mkdir()
    write_run(db)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for command, args in (("export", ["export", "--store", str(db), "--format", "results", "--out", out]),
                          ("leaderboard", ["leaderboard", str(db), "--out", out]),
                          ("report", ["report", "--store", str(db), "--out", out])):
        assert main(args) == 2, command
        captured = capsys.readouterr()
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert lines == [f"error: {command}: --out is empty; give a folder"], captured.err
        assert captured.out == "" and "Traceback" not in captured.err
    assert list(work.iterdir()) == [] and sorted(p.name for p in db.parent.iterdir()) == ["r.db"]
    with pytest.raises(ShiftbenchError, match="export: --out is empty"):
        ex.export_store(db, out, "jsonl")


@pytest.mark.parametrize("module", ["shiftbench.files", "shiftbench.report.caveats", "shiftbench.report.blocks"])
def test_module_doctests(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0
