"""Issue 36 item B: a contexts file (``dataset_params: {contexts: FILE}``, datasets/contexts.py) that gives a key
twice is refused in one line naming the file, the key and both lines, in every format the reader accepts (TSV,
JSON); and an input file is part of the run's identity by its bytes (engine/identity.py): an edit in place that
keeps its size and mtime stops the resume of the old run, as any changed input does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import shiftbench as sb
import tiny_registry  # noqa: F401  (the _test_tiny dataset)
from shiftbench.datasets.common import shown
from shiftbench.datasets.contexts import read_contexts
from shiftbench.datasets.objects import CONTEXTS
from shiftbench.errors import ShiftbenchError, StoreError

EXAMPLES = 300
PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# key text: any character a file can hold, with those that str.splitlines() and str.strip() treat specially,
# and markup, quotes, wide characters; a TSV key cannot hold a tab or a line break (they end the cell, the line)
ODD = ["\u2028", "\x1c", "\x0b", "\x0c", "\x85", "\u00a0", " ", "#", "猫", "🐈", "é", "'", '"', "\\", "<", "/"]
CHAR = st.one_of(st.characters(blacklist_categories=("Cs",)), st.sampled_from(ODD))
PIECES = st.lists(st.one_of(st.text(CHAR, min_size=1, max_size=4), st.sampled_from(["<b>", "&amp;", "[red]", "%s"])),
                  min_size=1, max_size=4).map("".join)
TSV_KEY = PIECES.filter(
    lambda k: "\t" not in k and "\n" not in k and "\r" not in k and k == k.strip() and k and not k.startswith("#"))
JSON_KEY = st.one_of(st.just(""), PIECES)
VALUES = st.lists(st.sampled_from(CONTEXTS), min_size=1, max_size=3, unique=True)
FILLER = st.lists(st.sampled_from(["", "   ", "# a comment", "  # indented\tcomment", "\t"]), max_size=2)


@st.composite
def tsv_with_a_repeat(draw):
    """A TSV contexts file whose keys are distinct but one, given twice at any two positions, with blank and
    comment lines anywhere, an optional header, spaces around keys and either line ending; returns (text, key,
    first line, second line)."""
    keys = draw(st.lists(TSV_KEY, min_size=1, max_size=6, unique=True))
    first = draw(st.integers(0, len(keys) - 1))
    second = draw(st.integers(first + 1, len(keys)))  # the repeat goes before entry `second` (or last)
    order = keys[:second] + [keys[first]] + keys[second:]
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append("class\tcontexts")
    seen: dict[str, list[int]] = {}
    for key in order:
        lines.extend(draw(FILLER))
        pad = draw(st.sampled_from(["", " ", "  "])), draw(st.sampled_from(["", " "]))
        lines.append(f"{pad[0]}{key}{pad[1]}\t{','.join(draw(VALUES))}")
        seen.setdefault(key, []).append(len(lines))
    lines.extend(draw(FILLER))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines) + draw(st.sampled_from(["", newline])), keys[first], *seen[keys[first]]


@st.composite
def json_with_a_repeat(draw):
    """A JSON contexts object with one key given twice (written with or without escapes), any whitespace between
    the tokens; returns (text, key, first line, second line)."""
    keys = draw(st.lists(JSON_KEY, min_size=1, max_size=6, unique=True))
    first = draw(st.integers(0, len(keys) - 1))
    second = draw(st.integers(first + 1, len(keys)))
    order = keys[:second] + [keys[first]] + keys[second:]
    space = st.sampled_from(["", " ", "\n", "\n  ", "\t", " \n\n "])
    text, lines = draw(space) + "{", []
    for i, key in enumerate(order):
        text += draw(space)
        if key == keys[first]:
            lines.append(text.count("\n") + 1)
        value = draw(VALUES)
        text += (json.dumps(key, ensure_ascii=draw(st.booleans())) + draw(space) + ":" + draw(space) +
                 json.dumps(value if draw(st.booleans()) else ",".join(value)) + draw(space))
        text += "," if i < len(order) - 1 else ""
    text += "}" + draw(space)
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")  # read back as \n: the lines an editor shows
    return text, keys[first], *lines


def refused_naming_both_lines(path, text, key, a, b) -> None:
    """``text`` written to ``path`` is refused in one line naming the file, ``key`` and its lines ``a`` and ``b``."""
    path.write_bytes(text.encode("utf-8"))
    with pytest.raises(ShiftbenchError) as err:
        read_contexts(path)
    assert str(err.value) == (f"contexts {shown(path)}: {shown(key)} is given twice, on lines {a} and {b} (one line "
                              "per class or image)")
    assert "\n" not in str(err.value)


@PROPS
@given(case=tsv_with_a_repeat())
def test_a_tsv_key_given_twice_is_refused_naming_both_lines(tmp_path_factory, case):
    """Promise: a TSV contexts file that gives a key twice (any key text, any two positions, blank lines,
    comments, a header, spaces around the key, CRLF) is refused in one line naming the file, the key and the
    two lines it is on, never read with one value silently winning."""
    refused_naming_both_lines(tmp_path_factory.mktemp("tsv") / "contexts.tsv", *case)


@PROPS
@given(case=json_with_a_repeat())
def test_a_json_key_given_twice_is_refused_naming_both_lines(tmp_path_factory, case):
    """Promise: a JSON contexts file that gives a key twice (any key text, escaped or not, any positions and
    whitespace) is refused in one line naming the file, the key and both lines, where json.loads would keep the
    last value silently."""
    refused_naming_both_lines(tmp_path_factory.mktemp("json") / "contexts.json", *case)


@PROPS
@given(keys=st.lists(JSON_KEY, max_size=6, unique=True), data=st.data())
def test_a_json_file_without_repeats_reads_as_json_loads_does(tmp_path_factory, keys, data):
    """Promise: the reader that finds repeats reads every valid object without one to exactly the table of
    json.loads, in file order."""
    table = {k: data.draw(VALUES) for k in keys}
    path = tmp_path_factory.mktemp("json") / "contexts.json"
    path.write_text(json.dumps(table, indent=data.draw(st.sampled_from([None, 1, "\t"])),
                               ensure_ascii=data.draw(st.booleans())), encoding="utf-8")
    got = read_contexts(path)
    assert list(got) == keys and all(set(got[k]) == set(v) for k, v in table.items())


# -- through a dataset and the command line ----------------------------------------------------------------------
def write_folder(root: Path) -> Path:
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            Image.fromarray(np.full((12, 12, 3), 40 * i + (c == "dog") * 100, np.uint8)).save(root / c / f"{i}.png")
    return root


def test_a_repeated_key_is_refused_when_the_dataset_is_opened_and_by_the_dry_run(tmp_path, capsys):
    """Promise: the refusal holds where users meet it: ``load_dataset(..., contexts=FILE)`` and
    ``evaluate --dry-run`` (one ``error:`` line, exit status 2), for TSV and JSON alike."""
    from shiftbench.cli import main

    root = write_folder(tmp_path / "photos")
    tsv, js = tmp_path / "c.tsv", tmp_path / "c.json"
    tsv.write_text("class\tcontexts\ncat\tgrass\ndog\tindoor\n\ncat\tsky\n")
    js.write_text('{\n "cat": ["grass"],\n "dog": "indoor",\n "cat": "sky"\n}\n')
    for path, lines in ((tsv, (2, 5)), (js, (2, 4))):
        expected = f"contexts {path}: cat is given twice, on lines {lines[0]} and {lines[1]} (one line per class or image)"
        with pytest.raises(ShiftbenchError) as err:
            sb.load_dataset(str(root), contexts=str(path))
        assert str(err.value) == expected
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps({"dataset": str(root), "dataset_params": {"contexts": str(path)},
                                    "models": [{"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"]}}],
                                    "shifts": ["clean"], "metrics": ["top1"]}))
        code = main(["evaluate", "--config", str(spec), "--dry-run"])
        err_text = capsys.readouterr().err
        lines_out = [line for line in err_text.splitlines() if line.strip()]
        assert code == 2 and len(lines_out) == 1 and expected in lines_out[0], err_text


# -- the identity: bytes, not sizes and times --------------------------------------------------------------------
@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIFTBENCH_CACHE", str(tmp_path / "cache"))


def edit_in_place(path: Path, text: str) -> None:
    """Write ``text`` (of the file's size) into ``path`` and put its times back: size and mtime unchanged."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    with open(path, "r+b") as fh:
        fh.write(text.encode())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_contexts_file_edited_in_place_with_the_same_size_and_mtime_never_resumes_the_old_run(tmp_path, capsys):
    """Promise: the contexts file is part of the run's identity by its SHA-256: an edit that keeps its size and
    mtime stops the resume of the old run with one line naming what changed (from Python and from the CLI, dry
    run included); new_run starts a new run; the same bytes again resume the old run."""
    from shiftbench.cli import main

    root = write_folder(tmp_path / "photos")
    table = tmp_path / "contexts.tsv"
    table.write_text("cat\tgrass\ndog\tindoor\n")
    spec = {"dataset": str(root), "dataset_params": {"contexts": str(table)},
            "models": [{"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"]}}],
            "shifts": ["clean"], "metrics": ["top1"]}
    db = tmp_path / "r.db"
    first = sb.evaluate(spec, store=db)
    run = first[0]["run_id"]
    assert {r["run_id"] for r in sb.evaluate(spec, store=db)} == {run}  # unchanged: resumes
    edit_in_place(table, "cat\twater\ndog\tindoor\n")  # grass -> water: same length
    with pytest.raises(StoreError) as err:
        sb.evaluate(spec, store=db)
    assert str(err.value) == (f"run {run}: dataset {str(root)!r} changed (contexts: the same size, other contents or "
                              "file times); pass new_run=True to start a new run")
    config = tmp_path / "spec.yaml"
    config.write_text(json.dumps(spec))
    for extra in (["--dry-run"], []):
        code = main(["evaluate", "--config", str(config), "--store", str(db), *extra])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].endswith("pass --new-run to start a new run"), lines
        assert "contexts: the same size, other contents" in lines[0]
    second = sb.evaluate(spec, store=db, new_run=True)
    assert {r["run_id"] for r in second} != {run}
    edit_in_place(table, "cat\tgrass\ndog\tindoor\n")  # the first bytes again: the first run's identity
    assert {r["run_id"] for r in sb.evaluate(spec, store=db)} == {run}


def test_an_ids_file_edited_in_place_with_the_same_size_and_mtime_never_resumes_the_old_run(tmp_path):
    """Promise: the ids file, the other input hashed into the identity, is read for its bytes too: a same-size,
    same-mtime edit stops the resume, naming the file."""
    ids = tmp_path / "ids.txt"
    ids.write_text("img000\nimg001\nimg002\n")
    spec = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
            "shifts": ["clean"], "metrics": ["top1"], "ids": str(ids)}
    db = tmp_path / "r.db"
    sb.evaluate(spec, store=db)
    edit_in_place(ids, "img000\nimg001\nimg003\n")
    with pytest.raises(StoreError, match=r"ids file '.*ids\.txt' changed \(sha256 .*\); pass new_run=True"):
        sb.evaluate(spec, store=db)


def test_a_dataset_file_edited_in_place_never_resumes_the_old_run(tmp_path):
    """Promise: every file-valued dataset input (here a COCO annotation file as the dataset itself) is identified
    by its bytes: an edit in place that keeps size and mtime is another identity."""
    from shiftbench.engine.identity import path_fingerprint

    path = tmp_path / "instances.json"
    path.write_text('{"images": [], "annotations": [], "categories": [{"id": 1, "name": "cat"}]}')
    before = path_fingerprint(path)
    edit_in_place(path, '{"images": [], "annotations": [], "categories": [{"id": 2, "name": "cat"}]}')
    after = path_fingerprint(path)
    assert (before["files"], before["bytes"]) == (after["files"], after["bytes"]) and before["sha256"] != after["sha256"]
