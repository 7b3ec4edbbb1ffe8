"""The dry run's promise, over every registered shift: a dry run (``shiftbench evaluate --dry-run``, the
function behind it: ``engine.evaluate.prepare``) passes if and only if the first batch of every planned
condition runs, on a user's own image folder (``root/<class>/<img>.png``: no masks, no contexts, no captions)
and on tiny images; when both stop, they stop on the same one line, naming the spec's entry and the sample."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from shiftbench.engine.evaluate import evaluate, prepare
from shiftbench.errors import ShiftbenchError

from conftest import make_image

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
# diffusion pipelines from a hub: their mechanics are tested with tiny models built from config elsewhere
HUB = {"adversarial_diffusion", "background_inpaint"}
SPECIAL = {
    "chain": {"name": "chain", "shifts": ["background_color", "gaussian_noise"]},
    # the source classifier's weights are bundled: one attack step keeps it cheap
    "adversarial_texture": {"name": "adversarial_texture", "params": {"steps": 1}, "severities": [1]},
}
ENTRIES = {name: SPECIAL.get(name, name) for name in sb.list_shifts() if name not in HUB}
ENTRIES["mixed_same"] = {"name": "background_scene", "params": {"scene": "mixed_same"}}
ENTRIES["mixed_rand"] = {"name": "background_scene", "params": {"scene": "mixed_rand"}}
# (h, w) of cat/0.png and cat/1.png, the first batch (limit 2, batch 2); dog/ fills the class list
FOLDERS = {"user": [(40, 48), (48, 40)], "4x4": [(4, 4), (4, 4)], "1x9": [(1, 9), (1, 9)],
           "big-then-tiny": [(40, 48), (8, 8)]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for key, sizes in FOLDERS.items():
        root = tmp_path_factory.mktemp("promise") / key
        for c in ("cat", "dog"):
            (root / c).mkdir(parents=True)
            for i, (h, w) in enumerate(sizes):
                Image.fromarray(make_image(h, w, seed=i)).save(root / c / f"{i}.png")
        out[key] = root
    return out


def spec_for(root: Path, entry) -> dict:
    name = entry if isinstance(entry, str) else entry["name"]
    metrics = ["top1", "flip_prob"] if name.startswith("p_") else ["top1"]  # clean (always run) and the sequences
    return {"dataset": str(root), "models": [{"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"]}}],
            "shifts": [entry], "metrics": metrics, "limit": 2, "batch_size": 2}


def outcome(fn) -> str | None:
    """None when ``fn`` runs; the one line a user mistake prints otherwise (any other exception propagates)."""
    try:
        fn()
    except ShiftbenchError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("folder", sorted(FOLDERS))
@pytest.mark.parametrize("shift", sorted(ENTRIES))
def test_dry_run_passes_iff_the_first_batch_runs(folders, shift, folder):
    spec = spec_for(folders[folder], ENTRIES[shift])
    dry = outcome(lambda: prepare(spec))
    real = outcome(lambda: evaluate(spec))
    assert (dry is None) == (real is None), f"dry run: {dry!r}; real run: {real!r}"
    if dry is not None:
        assert dry == real and "\n" not in dry
        assert dry.startswith("shifts[0]: shift ") and "cannot run on sample 'cat/" in dry


def test_what_the_known_failures_say(folders):
    """The two known gaps, now refused by the dry run with what to do."""
    msg = outcome(lambda: prepare(spec_for(folders["user"], ENTRIES["mixed_same"])))
    assert "background_scene" in msg and "'cat/0.png'" in msg and "meta 'contexts'" in msg and "scene: random" in msg
    msg = outcome(lambda: prepare(spec_for(folders["big-then-tiny"], "gaussian_blur")))
    assert "'cat/1.png'" in msg and "at least 32x32 px, got 8x8" in msg  # the batch's second sample, not only the first
    # with on_error: skip the run leaves such samples out rather than stopping: nothing to refuse up front
    assert outcome(lambda: prepare(dict(spec_for(folders["4x4"], "gaussian_blur"), on_error="skip"))) is None


def test_the_cli_dry_run_says_it_in_one_line(folders, tmp_path):
    config = tmp_path / "spec.yaml"
    config.write_text(f"dataset: {folders['user']}\n"
                      "models: [{name: dummy_classifier, params: {label_space: [cat, dog]}}]\n"
                      "shifts: [gaussian_noise, {name: background_scene, params: {scene: mixed_rand}}]\n"
                      "metrics: [top1]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent / "src")]), COLUMNS="200")
    code = "import sys\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(config), "--dry-run"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: ") and "Traceback" not in line
    assert f"{config}: shifts[1]: shift 'background_scene'" in line and "mixed_rand" in line and "'cat/0.png'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no store


def test_a_valid_run_is_unchanged_by_the_check(folders):
    """Drawing the first batch up front takes nothing from the run: the same rows as drawing them only in it."""
    spec = spec_for(folders["user"], {"name": "gaussian_noise", "severities": [1, 4]})
    rows = evaluate(spec)
    again = evaluate(dict(spec, on_error="skip"))  # skip mode does not check up front
    key = [(r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in rows]
    assert key == [(r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in again]
    assert np.all([r["n"] == 2 for r in rows])
