"""Writers never destroy (issue 25): `generate` and `report` write only inside their out folder, replace and
remove only files they made, refuse an out folder overlapping the data; a failed run leaves nothing that
blocks its retry; unusable out folders, damaged stores and params that are not a shift's are one line.

Everything runs through the CLI as a user would (``shiftbench.cli.main``), over generated inputs (Hypothesis:
user files of any name, folder layouts, damaged store bytes, perturbed params), plus the corpus's writer
cases (tests/corpus/cases_writers.py), run here with their ``extra`` expectations.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shiftbench as sb
import tiny_registry  # noqa: F401  (registers _test_tiny, _test_noise and _test_modeled)
from conftest import make_image, make_sample
from corpus.cases_writers import CASES
from shiftbench.cli import main
from shiftbench.errors import ParamsError, SeverityError
from shiftbench.files import is_temp, temp_path, write_atomic
from shiftbench.registry import SHIFTS
from shiftbench.report import build_report

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
GENERATE = ["generate", "--shift", "_test_noise", "--severity", "1"]


# -- helpers -------------------------------------------------------------------------------------------------
def cli(capsys, *argv: object) -> tuple[int, str, str]:
    """``shiftbench ARGV`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def assert_one_line(rc: int, out: str, err: str, *names: object) -> str:
    """Exit 2 and exactly one ``error: ...`` line, naming each of ``names``; returns the line."""
    assert rc == 2, (out, err)
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (hidden ones too), by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def image_folder(root: Path) -> Path:
    from PIL import Image

    for i, cls in enumerate(("c0", "c1")):
        (root / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(make_image(32, 40, seed=i)).save(root / cls / f"img{i}.png")
    return root


def dead_pid() -> int:
    """The id of a process that has ended (this machine)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


NAMES = st.one_of(
    st.sampled_from(["x.part", "a.png.part", ".hidden", ".x.part", "manifest.jsonl", "manifest.partial.jsonl",
                     "generate.json", "_test_noise", "1", "class0", "notes.txt", "report.html", "tables.md",
                     "tables.csv", "drop_heatmap.png", ".shiftbench-report.json", "img000.png"]),
    st.text(st.sampled_from("abcxyz_.-0 é"), min_size=1, max_size=8).filter(lambda n: n.strip(".") != ""),
)
USER_TREES = st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=3), st.binary(max_size=40)),
                      min_size=1, max_size=6)


def write_user_tree(root: Path, tree, avoid: set[str] = frozenset()) -> dict[str, bytes]:
    """Write the generated user files (skipping a path whose folder would be one of the files, and those whose
    first part is in ``avoid``); returns them."""
    files: dict[str, bytes] = {}
    for parts, data in tree:
        rel = "/".join(parts)
        if parts[0] in avoid:
            continue
        if any("/".join(parts[:i]) in files for i in range(1, len(parts))) or \
                any(f.startswith(rel + "/") for f in files):
            continue
        files[rel] = data
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


# -- 1. generate and report never touch a file they did not make ------------------------------------------------
GENERATE_NAMES = {"manifest.jsonl", "manifest.partial.jsonl", "generate.json", "_test_noise"}


@settings(max_examples=12, **SETTINGS)
@given(tree=USER_TREES, collide=st.booleans())
def test_generate_keeps_every_user_file_in_its_out_folder(capsys, tree, collide):
    """Into a folder of user files of any name it either works (no name of its own taken) or refuses in one
    line; either way every user file keeps its bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        files = write_user_tree(out, tree, avoid=set() if collide else GENERATE_NAMES)
        rc, stdout, err = cli(capsys, *GENERATE, "--dataset", "_test_tiny", "--limit", "2", "--out", out)
        if rc == 2:
            assert collide
            assert_one_line(rc, stdout, err, out)
        else:
            assert rc == 0, err
            assert (out / "manifest.jsonl").is_file() and (out / "_test_noise" / "1" / "class0" / "img000.png").is_file()
        after = snapshot(out)
        assert {k: after.get(k) for k in files} == files  # every user file, byte for byte
        assert not [p for p in out.rglob("*") if is_temp(p)]  # no temporary file of its own left


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("store")
    spec = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
            "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2]}], "metrics": ["top1"],
            "limit": 4, "batch_size": 4}
    sb.evaluate(spec, store=folder / "r.db")
    return folder / "r.db"


@pytest.fixture(scope="module")
def report_names(small_store, tmp_path_factory) -> set[str]:
    """The names a report of the small store writes (its own record included)."""
    out = tmp_path_factory.mktemp("names") / "rep"
    build_report(small_store, out)
    return {p.name for p in out.iterdir()}


@settings(max_examples=6, **SETTINGS)
@given(tree=USER_TREES, collide=st.booleans())
def test_report_keeps_every_user_file_in_its_out_folder(capsys, small_store, report_names, tree, collide):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        files = write_user_tree(out, tree, avoid=set() if collide else report_names)
        rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", out)
        if rc == 2:
            assert collide
            assert_one_line(rc, stdout, err, out)
        else:
            assert rc == 0 and (out / "report.html").is_file(), err
        after = snapshot(out)
        assert {k: after.get(k) for k in files} == files
        assert not [p for p in out.rglob("*") if is_temp(p)]


def test_temporary_names_are_shiftbench_only_and_removed_by_the_run_that_failed(tmp_path):
    target = tmp_path / "a.json"
    assert is_temp(temp_path(target)) and temp_path(target) != temp_path(target)
    assert not any(is_temp(tmp_path / n) for n in ("a.json.part", "x.part", ".a.json.part", ".a.shiftbench-1-xyz.part"))
    with pytest.raises(RuntimeError):
        from shiftbench.files import atomic_path

        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    write_atomic(target, "whole")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_later_run_removes_a_killed_runs_temporary_files_and_nothing_else(capsys, tmp_path):
    out = tmp_path / "out"
    args = [*GENERATE, "--dataset", "_test_tiny", "--limit", "2", "--out", out]
    assert cli(capsys, *args)[0] == 0
    folder = out / "_test_noise" / "1" / "class0"
    stale = folder / f".img000.png.shiftbench-{dead_pid()}-0123abcd.part"  # a killed run's, by its name
    running = folder / f".img000.png.shiftbench-{os.getpid()}-0123abcd.part"  # a live process's: still writing
    user = {folder / "img000.png.part": b"mine", out / "x.part": b"mine too", folder / ".partial": b"also mine"}
    for path, data in {stale: b"half", running: b"half", **user}.items():
        path.write_bytes(data)
    rc, stdout, err = cli(capsys, *args)
    assert rc == 0, err
    assert not stale.exists() and running.read_bytes() == b"half"
    assert all(path.read_bytes() == data for path, data in user.items())


# -- 2. an out folder at, inside or around the data is refused before any work ----------------------------------
SEGMENT = st.sampled_from(["a", "b", "data", "x y", "ünï", "c0"])


@settings(max_examples=20, **SETTINGS)
@given(data_rel=st.lists(SEGMENT, min_size=1, max_size=3), inside=st.lists(SEGMENT, min_size=1, max_size=2),
       mode=st.sampled_from(["same", "inside", "contains", "link-same", "link-inside", "dotdot", "beside"]),
       depth=st.integers(0, 2), relative=st.booleans())
def test_out_overlapping_the_dataset_is_refused_before_any_work(capsys, data_rel, inside, mode, depth, relative):
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp).resolve()
        data = image_folder(base.joinpath(*data_rel))
        (base / "link").symlink_to(data, target_is_directory=True)
        out = {"same": data, "inside": data.joinpath(*inside), "contains": base.joinpath(*data_rel[:min(depth, len(data_rel) - 1)]),
               "link-same": base / "link", "link-inside": base.joinpath("link", *inside),
               "dotdot": data / inside[0] / "..", "beside": data.parent / (data.name + "-out")}[mode]
        data_arg, out_arg = (data.relative_to(base), Path(os.path.relpath(out, base))) if relative else (data, out)
        before, existed = snapshot(base), out.exists()
        os.chdir(base)
        try:
            rc, stdout, err = cli(capsys, *GENERATE, "--dataset", data_arg, "--out", out_arg)
        finally:
            os.chdir(cwd)
        if mode == "beside":  # apart, though the names share a prefix: it works
            assert rc == 0, err
            assert (out / "_test_noise" / "1" / "c0" / "img0.png").is_file()
            assert {k: v for k, v in snapshot(base).items() if not k.startswith(str(out.relative_to(base)))} == before
            return
        assert_one_line(rc, stdout, err, out_arg, data_arg)
        assert snapshot(base) == before and out.exists() == existed  # not a byte written, not even the folder


def test_a_registered_datasets_own_folder_is_refused_too(capsys, tmp_path, monkeypatch):
    from shiftbench.datasets.imagefolder import ImageFolder
    from shiftbench.registry import DATASETS, Entry

    data = image_folder(tmp_path / "data")

    class Here(ImageFolder):  # a registered dataset reading its own folder (as the built-in ones do)
        def __init__(self, **kwargs):
            super().__init__(root=data, **kwargs)

    monkeypatch.setitem(DATASETS._entries, "_test_folder_here", Entry("_test_folder_here", Here, "test"))
    rc, stdout, err = cli(capsys, *GENERATE, "--dataset", "_test_folder_here", "--out", data / "shifted")
    assert_one_line(rc, stdout, err, data / "shifted", data)
    assert not (data / "shifted").exists()


# -- 3. a failed run that wrote no output leaves nothing that blocks the retry ----------------------------------
@pytest.mark.parametrize("out_existed", [False, True])
def test_a_failed_run_without_output_leaves_nothing_that_blocks_the_retry(capsys, tmp_path, out_existed):
    out = tmp_path / "out"
    if out_existed:
        out.mkdir()
    base = ["generate", "--dataset", "_test_tiny", "--shift", "_test_modeled", "--severity", "2", "--limit", "3",
            "--out", out]
    rc, stdout, err = cli(capsys, *base, "--param", "fail_on=img000")
    assert_one_line(rc, stdout, err, "img000")
    assert out.exists() == out_existed and (not out_existed or list(out.iterdir()) == [])
    rc, stdout, err = cli(capsys, *base, "--param", "fail_on=nothing")  # other settings: a fresh start
    assert rc == 0, err
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 3


def test_a_failed_run_that_wrote_outputs_keeps_them_for_its_resume(capsys, tmp_path):
    out = tmp_path / "out"
    base = ["generate", "--dataset", "_test_tiny", "--shift", "_test_modeled", "--severity", "2", "--limit", "6",
            "--shard-size", "2", "--out", out]
    rc, stdout, err = cli(capsys, *base, "--param", "fail_on=img004")
    assert_one_line(rc, stdout, err, "img004")
    assert (out / "manifest.partial.jsonl").read_text().count("\n") == 4  # two units done before the failing one
    rc, stdout, err = cli(capsys, *base, "--param", "fail_on=nothing")
    assert_one_line(rc, stdout, err, "other settings")  # the outputs there are another run's: never mixed


def test_a_user_folder_holding_generates_names_is_refused_and_kept(capsys, tmp_path):
    out = tmp_path / "out"
    (out / "_test_noise").mkdir(parents=True)
    (out / "_test_noise" / "mine.png").write_bytes(b"mine")
    rc, stdout, err = cli(capsys, *GENERATE, "--dataset", "_test_tiny", "--limit", "2", "--out", out)
    assert_one_line(rc, stdout, err, out, "_test_noise", "generate.json")
    assert snapshot(out) == {"_test_noise/mine.png": b"mine"}
    (out / "generate.json").write_text("[not, json")
    rc, stdout, err = cli(capsys, *GENERATE, "--dataset", "_test_tiny", "--limit", "2", "--out", out)
    assert_one_line(rc, stdout, err, out / "generate.json")


# -- 4. report over an earlier report, and an --out that cannot be made -------------------------------------------
def test_report_over_an_earlier_report_names_what_it_replaces(capsys, small_store, tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "x.part").write_bytes(b"mine")
    rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", out)
    assert rc == 0 and err == "", err
    first = snapshot(out)
    rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", out)
    assert rc == 0, err
    lines = err.strip().splitlines()
    made = sorted(k for k in first if k not in ("x.part", ".shiftbench-report.json"))
    assert len(lines) == 1 and lines[0].startswith(f"warning: report: replacing {len(made)} file(s) of an earlier "
                                                   f"report in {out}: ")
    assert sorted(lines[0].split(": ", 3)[3].split(", ")) == made
    assert snapshot(out) == first  # the same bytes again; the user's file kept


def test_report_made_before_the_record_is_replaced_but_a_foreign_file_is_not(capsys, small_store, tmp_path):
    out = tmp_path / "rep"
    assert cli(capsys, "report", "--store", small_store, "--out", out)[0] == 0
    (out / ".shiftbench-report.json").unlink()  # a report of an earlier version: its report.html says so
    rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", out)
    assert rc == 0 and "replacing" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "tables.md").write_text("my own tables")
    rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", other)
    assert_one_line(rc, stdout, err, other, "tables.md")
    assert snapshot(other) == {"tables.md": b"my own tables"}


def test_report_out_that_cannot_be_made_is_one_line(capsys, small_store, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("x")
    for out, says in ((tmp_path / "afile" / "rep", "cannot create the folder"),
                      (tmp_path / "afile", "exists and is not a folder")):
        rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", out)
        assert_one_line(rc, stdout, err, out, says)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes through mode bits: the folder refuses as it would a user
        real_mkdir = os.mkdir

        def refuse(path, *args, **kwargs):
            if str(path).startswith(str(locked)):
                raise PermissionError(13, "Permission denied", str(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", refuse)
    try:
        rc, stdout, err = cli(capsys, "report", "--store", small_store, "--out", locked / "rep")
        assert_one_line(rc, stdout, err, locked / "rep", "Permission denied")
        rc, stdout, err = cli(capsys, *GENERATE, "--dataset", "_test_tiny", "--out", locked / "gen")
        assert_one_line(rc, stdout, err, locked / "gen", "Permission denied")
    finally:
        locked.chmod(0o755)


# -- 5. damaged stores: report and evaluate work or refuse in one line naming the store ---------------------------
DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.05, 0.98), st.just(b"")),
    st.tuples(st.just("overwrite"), st.floats(0.0, 0.99), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("zero-page"), st.floats(0.0, 0.99), st.just(b"")),
)


def damage(source: Path, target: Path, how) -> None:
    kind, where, data = how
    raw = bytearray(source.read_bytes())
    at = max(100, int(len(raw) * where))  # past SQLite's 100-byte header: the pages themselves
    if kind == "truncate":
        raw = raw[:at]
    elif kind == "overwrite":
        raw[at:at + len(data)] = data
    else:
        page = 4096 * (at // 4096) or 4096
        raw[page:page + 4096] = bytes(min(4096, max(0, len(raw) - page)))
    target.write_bytes(bytes(raw))


def assert_works_or_one_line(rc: int, stdout: str, err: str, store: Path) -> None:
    assert "Traceback" not in stdout + err
    if rc != 0:
        assert_one_line(rc, stdout, err, store)


@settings(max_examples=25, **SETTINGS)
@given(how=DAMAGE)
def test_report_on_a_damaged_store_works_or_is_one_line(capsys, small_store, how):
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "damaged.db"
        damage(small_store, store, how)
        rc, stdout, err = cli(capsys, "report", "--store", store, "--out", Path(tmp) / "rep")
        assert_works_or_one_line(rc, stdout, err, store)
        assert rc != 0 or (Path(tmp) / "rep" / "report.html").is_file()


def spec_file(folder: Path) -> Path:
    spec = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
            "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2]}], "metrics": ["top1"],
            "limit": 4, "batch_size": 4}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@settings(max_examples=8, **SETTINGS)
@given(how=DAMAGE)
def test_evaluate_onto_a_damaged_store_works_or_is_one_line(capsys, small_store, how):
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "damaged.db"
        damage(small_store, store, how)
        rc, stdout, err = cli(capsys, "evaluate", "--config", spec_file(Path(tmp)), "--store", store)
        assert_works_or_one_line(rc, stdout, err, store)


def _lacking_columns(path: Path) -> None:
    """A store whose results table lacks its value column (a hand edit, another tool's schema)."""
    from shiftbench.results.store import Store

    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE results")
        conn.execute("CREATE TABLE results (condition_id INTEGER, metric TEXT, n INTEGER)")
        conn.execute("INSERT INTO runs (run_id, spec_json, spec_hash, versions_json, seed, started, status)"
                     " VALUES ('r', '{}', 'h', '{}', 0, 0, 'done')")


STORES = {
    "not-sqlite": lambda p: p.write_text("name,value\nx,1\n"),
    "empty": lambda p: p.write_bytes(b""),
    "cut-in-the-header": lambda p: p.write_bytes(b"SQLite for"),
    "sqlite-without-tables": lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)").connection.commit(),
    "tables-lack-columns": _lacking_columns,
}


@pytest.mark.parametrize("kind", list(STORES))
def test_a_store_that_is_not_a_usable_one_is_one_line(capsys, tmp_path, kind):
    store = tmp_path / "results.db"
    STORES[kind](store)
    before = store.read_bytes()
    rc, stdout, err = cli(capsys, "report", "--store", store, "--out", tmp_path / "rep")
    assert_one_line(rc, stdout, err, store)
    assert store.read_bytes() == before and not (tmp_path / "rep").exists()  # a reader writes nothing
    if kind in ("empty", "cut-in-the-header"):
        return  # evaluate makes its store in an empty file (another process may be creating it)
    rc, stdout, err = cli(capsys, "evaluate", "--config", spec_file(tmp_path), "--store", store)
    assert_one_line(rc, stdout, err, store)


# -- 6. replay with params that are not the shift's names the key ------------------------------------------------
TEXT = "make the dog sit on a red sofa next to two cats"
SHIFT_NAMES = [n for n in sb.list_shifts() if not n.startswith("_")]  # the registry's own (tests add "_test...")
# shifts whose apply runs a pipeline from weights (diffusion, hub): their refusals above come before any
# pipeline loads; a good replay of theirs is tested with tiny random pipelines in their own test files
APPLIED_NAMES = [n for n in SHIFT_NAMES if n == "chain" or SHIFTS.entry(n).meta.get("contract", True)]


def _shift_and_input(name: str):
    shift = sb.chain(("background_color", {"color": "red"}), "gaussian_noise") if name == "chain" \
        else sb.create_shift(name)
    x = TEXT if shift.kind == "text" else make_sample(48, 64, seed=0, sid="id0")
    params = shift.draw_text(x, None, 5, "t0") if isinstance(x, str) else shift.draw(x, None, 5)
    return shift, x, params


def _sites(value, path=()):
    """(path to a mapping, key) for every key of every mapping in the params, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path, key
            yield from _sites(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _sites(item, path + (i,))


def _mappings(value, path=()):
    if isinstance(value, dict):
        yield path
    for key, item in (value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list)
                      else ()):
        yield from _mappings(item, path + (key,))


def _wrong(value) -> st.SearchStrategy:
    """Values of another JSON type than ``value`` (an integer where a number is drawn is not wrong)."""
    others = {"str": st.text(max_size=5), "list": st.lists(st.integers(), max_size=2), "none": st.none(),
              "bool": st.booleans(), "dict": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
              "int": st.integers(), "float": st.floats(allow_nan=False, allow_infinity=False).filter(
                  lambda f: not f.is_integer())}
    kind = ("bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
            if isinstance(value, float) else "str" if isinstance(value, str) else "list"
            if isinstance(value, list) else "dict")
    excluded = {kind} | ({"int"} if kind == "float" else set())
    return st.one_of(*[s for k, s in others.items() if k not in excluded])


def _at(value, path):
    for key in path:
        value = value[key]
    return value


@pytest.mark.parametrize("name", SHIFT_NAMES)
@settings(max_examples=8, **SETTINGS)
@given(data=st.data())
def test_replay_with_params_not_the_shifts_names_the_key(name, data):
    shift, x, params = _shift_and_input(name)
    bad = copy.deepcopy(params)
    sites = [s for s in _sites(params) if _at(params, s[0])[s[1]] is not None]
    action = data.draw(st.sampled_from(["extra"] + (["missing", "wrong-type"] if sites else [])))
    if action == "extra":
        where = data.draw(st.sampled_from(list(_mappings(params))))
        key = data.draw(st.text(st.sampled_from("abzé_ "), min_size=1, max_size=6).filter(
            lambda k: k not in _at(params, where)))
        _at(bad, where)[key] = 1
    else:
        where, key = data.draw(st.sampled_from(sites))
        if action == "missing":
            del _at(bad, where)[key]
        else:
            _at(bad, where)[key] = data.draw(_wrong(_at(params, where)[key]))
    if (where, key, action) == ((), "severity", "wrong-type") and _at(bad, where)[key] is not None:
        value = _at(bad, where)[key]
        lo, hi = shift.severities
        if getattr(shift, "continuous", False) and isinstance(value, float) and lo <= value <= hi:
            shift.replay(x, bad)  # an in-between severity of a dial is no wrong type: it replays
            return
        # checked as a severity, as a fresh call checks it
        with pytest.raises(SeverityError, match="severity"):
            shift.replay(x, bad)
        return
    with pytest.raises(ParamsError) as info:
        shift.replay(x, bad)
    assert repr(key) in str(info.value) and shift.name in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", APPLIED_NAMES)
def test_replay_with_the_shifts_own_params_still_replays(name):
    shift, x, params = _shift_and_input(name)
    out = shift.replay(x, params)
    again = shift.replay(x, params)
    assert out == again if isinstance(out, str) else (out.image == again.image).all()
    with pytest.raises(ParamsError, match="must be a mapping"):
        shift.replay(x, [params])


# -- the corpus's writer cases ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_writer_cases(case, capsys, tmp_path, monkeypatch):
    folder, out = tmp_path / "case", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    case.build(folder)
    for rel, text in case.extra.get("out_files", {}).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    before_case, before_out = snapshot(folder), snapshot(out)
    monkeypatch.chdir(folder)
    rc, stdout, err = cli(capsys, *[a.replace("{out}", str(out)) for a in case.argv])
    assert rc == case.exit and case.message in stdout + err, stdout + err
    if rc == 2:
        assert_one_line(rc, stdout, err)
    assert snapshot(folder) == before_case  # the inputs are never written to
    after = snapshot(out)
    assert all(after.get(rel) == before_out[rel] for rel in case.extra.get("unchanged", [])), after.keys()
    if rc == 2:
        assert after == before_out  # a refusal writes nothing, not even into {out}
