"""Docs that run: every code block of README.md and docs/*.md is executed here, through Sybil.

Each page runs top to bottom in a fresh folder of its own (``configs``, ``benchmarks``, ``tools`` and the
other checkout files a command names are linked in), its Python blocks sharing one namespace, so a page
defines every name it uses in a block the reader sees. By language:

- ``python``: executed as written;
- ``bash``: each command executed: ``shiftbench ...`` through the CLI's own entry point, ``python ...``
  in a fresh interpreter; a test command (``python -m pytest FILES``) is collected rather than run (the
  suite runs those tests itself); ``pip install`` is checked (the constraints file and each extra exist):
  the install itself is what scripts/test does before this suite runs;
- ``yaml``: a spec (it has ``dataset:``) is written (``# NAME.yaml`` on its first line names the file) and
  dry-run through ``shiftbench evaluate --dry-run``; a fragment is merged into a small spec and loaded;
- ``json``: parsed; ``text``: shown output or a layout, or a file the page gives (see ``file``), not code.

A directive in an HTML comment right above a block (``<!-- docs: ... -->``, invisible when rendered):

- ``file NAME``: the block is written to NAME in the page's folder (a contexts table, a label map);
- ``smoke KEY=ARGS; ...``: ARGS appended to the block's commands of KEY (a ``shiftbench`` subcommand or a
  script's file name), e.g. ``evaluate=--limit 4``: a whole study run at a smoke size;
- ``needs hub|gpu|cluster: WHY`` or ``run by PATH: WHY``: not executed here, counted, and kept few.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from sybil import Document
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
LINKED = ("benchmarks", "configs", "constraints-cpu.txt", "constraints-test.txt", "pyproject.toml", "scripts", "src",
          "tests", "tools")
RUN = ("python", "bash", "yaml", "json")
SHOWN = ("text",)
DIRECTIVE = re.compile(r"<!-- docs: (?P<body>[^\n]*?) -->[ \t]*\n$")
NOT_RUN = re.compile(r"(needs (?:hub|gpu|cluster)|run by (?P<path>[\w./-]+)): \S")
MOST_NOT_RUN = 6  # "the few blocks that need a hub download or a GPU": kept few, all pages together
BASE_SPEC = {"dataset": "objects", "models": ["efficientnet_lite0"], "shifts": ["clean"], "limit": 4}


@dataclass
class Ledger:
    """What a page's run did, block by block (the test's counts come from here)."""

    work: Path
    ran: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)


def _directive(example) -> str | None:
    """The ``<!-- docs: ... -->`` line right above the block, if any."""
    m = DIRECTIVE.search(example.document.text[:example.start])
    return m.group("body").strip() if m else None


def _where(example) -> str:
    path = Path(example.path)
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{example.line}"


def _ledger(example) -> Ledger:
    return example.namespace["__docs__"]


def _skipped(example, directive: str | None) -> bool:
    """A block marked as needing what this machine lacks (or run by another file): recorded, not run."""
    if directive is None or not NOT_RUN.match(directive):
        return False
    path = NOT_RUN.match(directive).group("path")
    assert path is None or (ROOT / path).exists(), f"{_where(example)}: 'run by {path}': no such file"
    _ledger(example).not_run.append(f"{_where(example)}: {directive}")
    return True


def _smoke(directive: str | None) -> dict[str, list[str]]:
    if not directive or not directive.startswith("smoke "):
        return {}
    out = {}
    for part in directive[len("smoke "):].split(";"):
        key, _, args = part.strip().partition("=")
        out[key.strip()] = shlex.split(args)
    return out


# -- python ----------------------------------------------------------------------------------------------
_PYTHON = PythonEvaluator()


def run_python(example) -> None:
    if _skipped(example, _directive(example)):
        return
    _PYTHON(example)
    example.namespace.pop("__builtins__", None)
    _ledger(example).ran.append(_where(example))


# -- bash ------------------------------------------------------------------------------------------------
def _commands(source: str) -> list[list[str]]:
    """Each command of a bash block: continuations joined, comments dropped, ``&&`` chains split."""
    commands = []
    for line in source.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1:]
    return [c for c in commands if c]


def _declared_extras() -> set[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {re.sub(r"[-_.]+", "-", x).lower() for x in extras}


def _check_pip(words: list[str], where: str) -> None:
    assert "install" in words, f"{where}: a pip command that is not an install: {words}"
    declared = _declared_extras()
    for i, w in enumerate(words):
        if w == "-c":
            assert (ROOT / words[i + 1]).is_file(), f"{where}: no constraints file {words[i + 1]}"
        for group in re.findall(r"^(?:\.|shiftbench)\[([\w,\-]+)\]$", w):
            missing = {re.sub(r"[-_.]+", "-", x).lower() for x in group.split(",")} - declared
            assert not missing, f"{where}: extras {sorted(missing)} are not in pyproject"


def _run_shiftbench(args: list[str], where: str) -> None:
    """Through the CLI's own entry point: user mistakes are its one-line errors and exit statuses."""
    from shiftbench.cli import main

    code = main(list(args))
    assert code == 0, f"{where}: shiftbench {shlex.join(args)} exited {code} (its output is above)"


def _run_python_command(args: list[str], env: dict[str, str], where: str, cwd: Path) -> None:
    import os

    if args[:2] == ["-m", "pytest"]:  # a test command: collected here, its tests run by the suite itself
        files = [a for a in args[2:] if not a.startswith("-")]
        assert files and all((ROOT / f).is_file() for f in files), f"{where}: no such test file in {files}"
        args = [*args, "--collect-only", "-q", "-p", "no:randomly"]
        cwd = ROOT
    full = {**os.environ, **{k: v.replace("$PWD", str(cwd)) for k, v in env.items()}}
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True)
    assert done.returncode == 0, (f"{where}: python {shlex.join(args)} exited {done.returncode}:\n"
                                  f"{(done.stdout + done.stderr)[-3000:]}")


def run_bash(example) -> None:
    directive = _directive(example)
    if _skipped(example, directive):
        return
    smoke = _smoke(directive)
    where = _where(example)
    seen = set()
    for words in _commands(example.parsed):
        env = {}
        while words and re.match(r"^[A-Z_]+=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        head, rest = words[0], words[1:]
        if head in ("python", "python3", ".venv/bin/python"):
            key = Path(rest[0]).name if rest and rest[0].endswith(".py") else rest[1] if rest[:1] == ["-m"] else ""
        else:
            key = rest[0] if rest else ""
        extra = smoke.get(key, [])
        if extra and not any(rest[i:i + len(extra)] == extra for i in range(len(rest))):
            rest = rest + extra
        if (head, *rest) in seen:  # the smoke size made it the block's command before it (a full run and its
            continue               # --quick): run once
        seen.add((head, *rest))
        if head == "shiftbench":
            _run_shiftbench(rest, where)
        elif head in ("python", "python3", ".venv/bin/python"):
            _run_python_command(rest, env, where, _ledger(example).work)
        elif head in ("pip", ".venv/bin/pip"):
            _check_pip(rest, where)
        else:
            raise AssertionError(f"{where}: {head!r} is not a command these docs may run (shiftbench, python, "
                                 "pip); mark the block with <!-- docs: run by PATH: WHY --> if another test runs it")
    _ledger(example).ran.append(where)


# -- yaml, json, text ------------------------------------------------------------------------------------
def run_yaml(example) -> None:
    directive = _directive(example)
    if _skipped(example, directive):
        return
    where = _where(example)
    text = str(example.parsed)
    data = yaml.safe_load(text)
    assert isinstance(data, dict), f"{where}: a YAML block that is not a mapping"
    work = _ledger(example).work
    if directive and directive.startswith("file "):
        (work / directive[len("file "):].strip()).write_text(text)
    if "dataset" in data:  # a whole spec: written (under its own name when the block gives one), dry-run
        name = re.match(r"#\s*(\S+\.ya?ml)\s*$", text.splitlines()[0])
        path = work / (name.group(1) if name else f"spec_line{example.line}.yaml")
        path.write_text(text)
        _run_shiftbench(["evaluate", "--config", str(path), "--dry-run"], where)
    else:  # a fragment: what it adds to a small spec loads
        from shiftbench.spec import load_spec

        load_spec({**BASE_SPEC, **data})
    _ledger(example).ran.append(where)


def run_json(example) -> None:
    if _skipped(example, _directive(example)):
        return
    json.loads(str(example.parsed))
    _ledger(example).ran.append(_where(example))


def run_text(example) -> None:
    directive = _directive(example)
    if directive and directive.startswith("file "):
        (_ledger(example).work / directive[len("file "):].strip()).write_text(str(example.parsed))
    _ledger(example).shown.append(_where(example))


PARSERS = [CodeBlockParser("python", run_python), CodeBlockParser("bash", run_bash),
           CodeBlockParser("yaml", run_yaml), CodeBlockParser("json", run_json), CodeBlockParser("text", run_text)]
FENCE = re.compile(r"^[ \t]*```(\S*)[^\n]*\n.*?^[ \t]*```", re.M | re.S)


def _fences(text: str) -> list[str]:
    return [m.group(1) for m in FENCE.finditer(text)]


def _run_page(page: str, work: Path) -> Ledger:
    document = Document.parse(str(ROOT / page), *PARSERS)
    ledger = Ledger(work)
    document.namespace["__docs__"] = ledger
    for example in document.examples():
        example.evaluate()
    return ledger


def _checkout_state() -> dict[str, tuple[int, int]]:
    """What a page's commands could change in the checkout through the links: the committed results, the
    configs and tools, and the checkout's top level (a demo or report written there)."""
    files = [p for d in ("benchmarks", "configs", "tools") for p in (ROOT / d).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    state = {p.relative_to(ROOT).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in files}
    state.update({f"/{p.name}": (0, 0) for p in ROOT.iterdir()})
    return state


@pytest.fixture
def page_folder(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    monkeypatch.chdir(work)
    before = _checkout_state()
    yield work
    after = _checkout_state()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the page's commands wrote into the checkout: {changed}"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs(page, page_folder):
    ledger = _run_page(page, page_folder)
    languages = _fences((ROOT / page).read_text())
    assert len(ledger.ran) + len(ledger.not_run) == sum(lang in RUN for lang in languages)
    assert len(ledger.shown) == sum(lang in SHOWN for lang in languages)


def test_every_block_says_its_language_and_is_run_or_shown():
    """A bare fence (or a language the runner does not know) would be neither run nor counted."""
    odd = {page: [lang or "(none)" for lang in _fences((ROOT / page).read_text()) if lang not in RUN + SHOWN]
           for page in PAGES}
    assert not {p: v for p, v in odd.items() if v}, odd


def test_blocks_not_run_here_are_few_and_say_why():
    marked = [(page, body) for page in PAGES for body in re.findall(r"<!-- docs: ([^\n]*?) -->[ \t]*\n[ \t]*```", (ROOT / page).read_text())
              if body.startswith(("needs", "run by"))]
    assert all(NOT_RUN.match(body) for _, body in marked), marked
    assert len(marked) <= MOST_NOT_RUN, marked
    total = sum(lang in RUN for page in PAGES for lang in _fences((ROOT / page).read_text()))
    assert total >= 40  # README.md and docs/ hold this many code blocks: all but the marked ones run


def test_the_runner_fails_a_block_that_fails(tmp_path, monkeypatch):
    """The harness itself: a block with an undefined name, a failing command or an unknown command fails."""
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.md"
    cases = {
        "```python\nprint(undefined_name)\n```\n": NameError,
        "```bash\nshiftbench list no-such-kind\n```\n": AssertionError,
        "```bash\nrm -rf somewhere\n```\n": AssertionError,
        "```yaml\ndataset: objects\nmodels: [efficientnet_lite0]\nshifts: [no_such_shift]\n```\n": AssertionError,
        "```json\n{\"a\": 1,}\n```\n": json.JSONDecodeError,
    }
    for text, error in cases.items():
        page.write_text(text)
        document = Document.parse(str(page), *PARSERS)
        document.namespace["__docs__"] = Ledger(tmp_path)
        with pytest.raises(error):
            for example in document.examples():
                example.evaluate()
