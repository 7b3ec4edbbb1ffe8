"""Issue 27 item 2: Mixed-Same / Mixed-Rand on a user's image folder, through the CLI.

Without contexts the dry run and the run refuse with the same one line, which says how to give them; with a
contexts file (``dataset_params: {contexts: FILE}``, datasets/contexts.py) the run works; a file that leaves a
class without contexts is refused by both, in the same line, before any work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from shiftbench.datasets.contexts import bundled_contexts, read_contexts
from shiftbench.errors import ShiftbenchError

from conftest import make_image

TESTS = Path(__file__).resolve().parents[1]
MIXED = "[{name: background_scene, params: {scene: mixed_same}}, {name: background_scene, params: {scene: mixed_rand}}]"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("contexts") / "photos"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(make_image(40, 48, seed=i + (c == "dog") * 7)).save(root / c / f"{i}.png")
    return root


def cli(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent / "src")]), COLUMNS="200")
    code = "import sys\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(config), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def spec(tmp_path: Path, folder: Path, params: str = "") -> Path:
    config = tmp_path / "spec.yaml"
    config.write_text(f"dataset: {folder}\n" + (f"dataset_params: {params}\n" if params else "") +
                      "models: [{name: dummy_classifier, params: {label_space: [cat, dog]}}]\n"
                      f"shifts: {MIXED}\nmetrics: [top1]\nbatch_size: 2\n")
    return config


def error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_without_contexts_the_dry_run_and_the_run_refuse_alike(folder, tmp_path):
    config = spec(tmp_path, folder)
    dry, run = error_line(cli(tmp_path, config, "--dry-run")), error_line(cli(tmp_path, config, "--store", "run.db"))
    assert dry == run
    assert "shifts[0]: shift 'background_scene'" in dry and "'cat/0.png'" in dry
    assert "dataset_params: {contexts: FILE}" in dry and "contexts: bundled" in dry  # how to give them
    assert not (tmp_path / "run.db").exists()  # refused before the store is opened


def test_with_a_contexts_file_the_run_works(folder, tmp_path):
    table = tmp_path / "contexts.tsv"
    table.write_text("# class or image<TAB>contexts\ncat\tindoor,street\ndog\tgrass\ndog/1.png\twater,rock\n")
    config = spec(tmp_path, folder, f"{{contexts: {table}}}")
    dry = cli(tmp_path, config, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    out = cli(tmp_path, config, "--store", "run.db", "--results-json", "rows.json")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads((tmp_path / "rows.json").read_text())
    scenes = {r["params"]["scene"] for r in rows if r["shift"] == "background_scene" and r["metric"] == "top1"}
    assert scenes == {"mixed_same", "mixed_rand"} and all(r["n"] == 4 for r in rows if r["metric"] == "top1")


def test_a_file_that_leaves_a_class_out_is_refused_by_both_alike(folder, tmp_path):
    table = tmp_path / "contexts.json"
    table.write_text(json.dumps({"cat": ["indoor"]}))
    config = spec(tmp_path, folder, f"{{contexts: {table}}}")
    dry, run = error_line(cli(tmp_path, config, "--dry-run")), error_line(cli(tmp_path, config, "--store", "run.db"))
    assert dry == run
    assert "gives no contexts for 2 image(s) of 1 class(es): dog" in dry


def test_the_contexts_sources(folder, tmp_path):
    tsv = tmp_path / "c.tsv"
    tsv.write_text("class\tcontexts\ncat\tstreet, indoor\ndog/0.png\tsky\ndog\tgrass\n")
    assert read_contexts(tsv) == {"cat": ("indoor", "street"), "dog/0.png": ("sky",), "dog": ("grass",)}
    ds = sb.load_dataset(str(folder), contexts=str(tsv))
    assert [ds.load(i).meta["contexts"] for i in range(len(ds))] == [["indoor", "street"]] * 2 + [["sky"], ["grass"]]
    shifted = sb.create_shift("background_scene", scene="mixed_rand")(ds.load(2), seed=0)  # sky: any non-sky scene
    assert shifted.image.shape == (40, 48, 3)
    for text, match in [("cat\tlava\n", "unknown context 'lava'"), ("cat\tgrass\ncat\tsky\n", "given twice"),
                        ("cat\n", "expected KEY<TAB>CONTEXTS"), ("cta\tgrass\ndog\tgrass\n", "did you mean 'cat'"),
                        ("cat\t\n", "no contexts given")]:
        tsv.write_text(text)
        with pytest.raises(ShiftbenchError, match=match):
            sb.load_dataset(str(folder), contexts=str(tsv))
    with pytest.raises(ShiftbenchError, match="no such file"):
        sb.load_dataset(str(folder), contexts=str(tmp_path / "missing.tsv"))
    with pytest.raises(ShiftbenchError, match="bundled table covers the 80 ImageNet wnids"):
        sb.load_dataset(str(folder), contexts="bundled")


def test_the_bundled_table_on_a_wnid_folder(tmp_path):
    table = bundled_contexts()
    assert len(table) == 80 and table["n01514859"] == ("grass",)  # hen (two hen objects, one context)
    root = tmp_path / "wnids"
    for wnid in ("n01514859", "n02391049"):  # hen, zebra
        (root / wnid).mkdir(parents=True)
        Image.fromarray(make_image(32, 32)).save(root / wnid / "a.png")
    ds = sb.load_dataset(str(root), contexts="bundled")
    assert [ds.load(i).meta["contexts"] for i in range(len(ds))] == [list(table["n01514859"]), list(table["n02391049"])]
    assert np.array_equal(sb.create_shift("background_scene", scene="mixed_same")(ds.load(1), seed=0).image.shape,
                          (32, 32, 3))
