"""Honest dry runs: ``--dry-run`` sets the run up (dataset, models, conditioning) and fails with the very
line the real run gives; a failed run leaves no store behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"
CODE = "import sys, tiny_registry\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"


def shiftbench(cwd: Path, *args: str, first: Path | None = None, **env_extra: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh process; ``first``: a folder put before everything on its import path."""
    paths = ([str(first)] if first else []) + [str(TESTS), str(SRC)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), COLUMNS="200", **env_extra)
    return subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


def write_folder(root: Path, bad: bool) -> None:
    """An image folder of two classes; with ``bad`` one file is not an image."""
    import numpy as np
    from PIL import Image

    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            # 32 px: the smallest images corruptions take (a dry run checks the first batch against it)
            Image.fromarray(np.full((32, 32, 3), 40 * i, np.uint8)).save(root / c / f"{i}.png")
    if bad:
        (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")


def block_package(folder: Path, name: str) -> Path:
    """A folder that, first on the import path, makes ``import name`` fail as a missing package does (the suite's
    environment has timm installed; a user's may not)."""
    (folder / name).mkdir(parents=True)
    (folder / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return folder


CASES = {
    "package_missing": ("dataset: _test_tiny\nmodels: [timm:resnet50]\nshifts: [clean]\nmetrics: [top1]\n", {}, "pip install"),
    "u2netp_missing": ("dataset: _test_tiny\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\n"
                       "shifts: [{name: background_color, params: {mask: u2netp}}]\nmetrics: [top1]\n",
                       {"SHIFTBENCH_U2NETP": "/nonexistent/u2netp.onnx"}, "u2netp"),
    "unreadable_image": ("dataset: {root}\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\n"
                         "shifts: [clean]\nmetrics: [top1]\n", {}, "broken.png"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_fails_with_the_real_runs_line(tmp_path, tmp_path_factory, case):
    text, env, needle = CASES[case]
    root = tmp_path / "folder"
    write_folder(root, bad=True)
    spec = tmp_path / "s.yaml"
    spec.write_text(text.replace("{root}", str(root)))
    first = block_package(tmp_path_factory.mktemp("blocked"), "timm") if case == "package_missing" else None
    dry = shiftbench(tmp_path, "evaluate", "--config", str(spec), "--dry-run", first=first, **env)
    real = shiftbench(tmp_path, "evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db"), first=first, **env)
    assert dry.returncode == 2 and real.returncode == 2, (dry.stderr, real.stderr)
    line = dry.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: ") and needle in line
    assert real.stderr.strip().splitlines()[-1] == line  # the same message, word for word
    assert "Traceback" not in real.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "s.yaml"]  # no store left behind


def test_dry_run_of_a_valid_folder_prints_the_plan(tmp_path):
    root = tmp_path / "folder"
    write_folder(root, bad=False)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"dataset: {root}\nmodels: [{{name: dummy_classifier, params: {{label_space: [cat, dog]}}}}]\n"
                    "shifts: [{name: gaussian_noise, severities: [1, 3]}]\nmetrics: [top1]\n")
    out = shiftbench(tmp_path, "evaluate", "--config", str(spec), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "6 samples" in out.stdout and "image folder" in out.stdout and "planned conditions (3)" in out.stdout
    assert "new store" in out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "s.yaml"]
