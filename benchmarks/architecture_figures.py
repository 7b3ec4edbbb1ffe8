"""The structural figures of issue 37, counted from the source (no import of shiftbench).

    python benchmarks/architecture_figures.py [SRC]      # SRC defaults to src/shiftbench

Prints a table:

- string-key lookups (``x["key"]``, ``.get("key")``, ``.pop("key")``, ``.setdefault("key")`` with a string
  constant) in report/headline.py, report/export.py, report/build.py and demo/run.py, and in all of
  report/ with demo/;
- condition types: classes or module-level aliases named ``Condition``, ``PlannedCondition`` or
  ``ConditionKey``;
- the largest parameter list of any function (``self``/``cls`` not counted) and how many exceed 8;
- imports of shiftbench's own modules inside function bodies (deferred imports);
- places that validate a seed: calls of ``check_seed``/``parse_seed`` (and ``Seed.parse``) outside seeds.py;
- lines of Python in SRC.

docs/architecture.md quotes the figures before and after the restructuring.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOKUP_FILES = ["report/headline.py", "report/export.py", "report/build.py", "demo/run.py"]
CONDITION_NAMES = {"Condition", "PlannedCondition", "ConditionKey"}
SEED_CHECKS = {"check_seed", "parse_seed"}


def _lookups(tree: ast.AST) -> int:
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            n += isinstance(node.slice.value, str)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            n += 1
    return n


def _internal(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "shiftbench"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "shiftbench" for a in node.names)


def _called(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f"{f.value.id}.{f.attr}" if isinstance(f.value, ast.Name) else f.attr
    return f.id if isinstance(f, ast.Name) else ""


def figures(src: Path) -> dict[str, object]:
    trees = {p.relative_to(src).as_posix(): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(src.rglob("*.py"))}
    params, deferred, conditions, seeds = [], 0, [], 0
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args]
                k = len(names) + len(a.kwonlyargs) - (names[:1] in (["self"], ["cls"]))
                params.append((k, f"{name}:{node.name}"))
                deferred += sum(_internal(inner) for inner in ast.walk(node) if inner is not node)
            elif isinstance(node, ast.ClassDef) and node.name in CONDITION_NAMES:
                conditions.append(f"{name}:{node.name}")
            elif isinstance(node, ast.Call) and name != "seeds.py":
                called = _called(node)
                seeds += called.split(".")[-1] in SEED_CHECKS or called == "Seed.parse"
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                conditions += [f"{name}:{t.id}" for t in targets if isinstance(t, ast.Name) and t.id in CONDITION_NAMES]
    params.sort(reverse=True)
    report_demo = [n for n in trees if n.startswith(("report/", "demo/"))]
    return {
        "string-key lookups (headline, export, build, demo)": sum(_lookups(trees[f]) for f in LOOKUP_FILES if f in trees),
        "string-key lookups (report/, demo/)": sum(_lookups(trees[f]) for f in report_demo),
        "condition types": f"{len(conditions)} ({', '.join(conditions)})",
        "largest parameter list": f"{params[0][0]} ({params[0][1]})",
        "functions over 8 parameters": sum(k > 8 for k, _ in params),
        "deferred internal imports": deferred,
        "seed validations outside seeds.py": seeds,
        "lines of Python": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in src.rglob("*.py")),
    }


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else ROOT / "src" / "shiftbench"
    rows = figures(src)
    width = max(map(len, rows))
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
