"""Build the adversarial corpus: every case of ``tests/corpus/cases_*.py`` into ``tests/corpus/cases/<name>/``.

Each case folder holds the small generated inputs of one hostile or odd input a user could bring, and
``expect.json``: the shiftbench command to run on it, the exit status and a piece of the message it must
print (see ``case.py``). ``tests/test_corpus.py`` rebuilds the corpus into a temporary folder, checks it
equals the committed one byte for byte, and runs every case through the CLI.

    python tests/corpus/build.py            # rewrite tests/corpus/cases/
    python tests/corpus/build.py --check    # exit 1 if the committed corpus differs from a rebuild
"""

from __future__ import annotations

import argparse
import filecmp
import importlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def all_cases() -> list:
    """Every Case from every ``cases_*.py`` beside this file, in file then list order; names unique."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    cases, seen = [], {}
    for path in sorted(HERE.glob("cases_*.py")):
        module = importlib.import_module(f"corpus.{path.stem}")
        for case in module.CASES:
            if not NAME.match(case.name):
                raise ValueError(f"{path.name}: case name {case.name!r} is not lowercase words joined by '-'")
            if case.name in seen:
                raise ValueError(f"{path.name}: case {case.name!r} is also defined in {seen[case.name]}")
            seen[case.name] = path.name
            cases.append(case)
    return cases


def build(dest: Path) -> list[str]:
    """Write every case under ``dest`` (emptied first); returns the case names."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    names = []
    for case in all_cases():
        folder = dest / case.name
        folder.mkdir()
        case.build(folder)
        (folder / "expect.json").write_text(json.dumps(case.expect(), indent=1, sort_keys=True) + "\n")
        names.append(case.name)
    return names


def differences(a: Path, b: Path) -> list[str]:
    """Relative paths that differ between two trees (missing on one side, or other bytes)."""
    out = []
    cmp = filecmp.dircmp(a, b)
    stack = [(cmp, Path("."))]
    while stack:
        node, rel = stack.pop()
        out += [str(rel / n) for n in node.left_only + node.right_only + node.funny_files]
        out += [str(rel / n) for n in node.common_files
                if (Path(node.left) / n).read_bytes() != (Path(node.right) / n).read_bytes()]
        stack += [(sub, rel / name) for name, sub in sorted(node.subdirs.items())]
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the committed corpus")
    args = parser.parse_args(argv)
    if not args.check:
        names = build(CASES_DIR)
        print(f"{len(names)} cases in {CASES_DIR}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp) / "cases")
        diff = differences(CASES_DIR, Path(tmp) / "cases") if CASES_DIR.exists() else ["cases/ (missing)"]
    for path in diff:
        print(f"differs: {path}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
