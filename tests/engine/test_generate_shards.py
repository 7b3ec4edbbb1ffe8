"""`generate --format webdataset|parquet`: shards read back (auto-detected) with the folder format's pixels,
labels and ids; evaluation equal to the folder's; bytes independent of the worker count; a killed run resumed
to the same bytes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import shiftbench as sb
from shiftbench.engine.generate import generate
from shiftbench.engine.shards import sample_key
from shiftbench.errors import ShiftbenchError
from test_generate import _wnid_folder, tree_bytes

pytest.importorskip("pyarrow")
TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SHIFTS = ["gaussian_noise", "pixelate"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The same run in the three formats (shards of 5 samples: 12 samples give 3 shards, the last short)."""
    root = tmp_path_factory.mktemp("shards")
    src = _wnid_folder(root / "data")
    out = {}
    for layout in ("folder", "webdataset", "parquet"):
        out[layout] = root / layout
        summary = generate(str(src), SHIFTS, [2], out[layout], seed=3, layout=layout, shard_samples=5)
        assert summary == {"written": 24, "skipped": 0, "total": 24, "unreadable": 0}
    return src, out


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_shards_read_back_like_the_folder(outputs, layout):
    src, out = outputs
    source = sb.load_dataset(str(src))
    manifest = [json.loads(line) for line in (out[layout] / "manifest.jsonl").read_text().splitlines()]
    for shift in SHIFTS:
        folder = sb.load_dataset(str(out["folder"] / shift / "2"))
        shards = sb.load_dataset(str(out[layout] / shift / "2"))  # auto-detected
        assert type(shards).__name__ == ("WebDatasetShards" if layout == "webdataset" else "ParquetImages")
        assert len(shards) == len(folder) == len(source) == 12
        assert shards.label_space.name == folder.label_space.name == "imagenet1k"
        by_id = {r["id"]: r for r in manifest if r["shift"] == shift}
        ext = "tar" if layout == "webdataset" else "parquet"
        assert sorted({r["output"] for r in by_id.values()}) == [f"{shift}/2/{'shard' if ext == 'tar' else 'part'}-"
                                                                f"{k:06d}.{ext}" for k in range(3)]
        for i in range(len(source)):
            a, b = folder.load(i), shards.load(i)
            assert np.array_equal(a.image, b.image) and a.label == b.label and a.class_name == b.class_name
            sid = source.sample_id(i)
            if layout == "parquet":  # the source ids, unchanged
                assert b.id == sid
            else:  # shard/key, mapped back through the manifest
                record = by_id[sid]
                assert b.id == f"shard-{i // 5:06d}/{sample_key(sid)}" == \
                    f"{Path(record['output']).stem}/{record['key']}"
                assert "." not in record["key"] and "/" not in record["key"]


def test_webdataset_members_carry_the_manifest_and_fixed_metadata(outputs):
    src, out = outputs
    manifest = {(r["shift"], r["index"]): r for r in
                (json.loads(line) for line in (out["webdataset"] / "manifest.jsonl").read_text().splitlines())}
    with tarfile.open(out["webdataset"] / "pixelate" / "2" / "shard-000001.tar") as tar:
        members = tar.getmembers()
        assert [m.name.rpartition(".")[2] for m in members[:3]] == ["png", "cls", "json"]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
        inside = json.loads(tar.extractfile(members[2]).read())
    record = manifest[("pixelate", 5)]
    assert inside == {k: v for k, v in record.items() if k not in ("output", "key")}
    source = sb.load_dataset(str(src))
    assert inside["id"] == source.sample_id(5) and inside["label"] == source.load(5).label
    assert inside["class_name"] == source.load(5).class_name and inside["shift"] == "pixelate"


def test_evaluate_on_webdataset_equals_folder(outputs, tmp_path):
    _, out = outputs

    def rows(path, db):
        spec = {"dataset": str(path), "models": ["dummy_classifier"], "shifts": ["clean"], "metrics": ["top1", "ece"],
                "seed": 4, "batch_size": 4}
        got = sb.evaluate(spec, store=tmp_path / db)
        return sorted((r["model"], r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in got)

    for shift in SHIFTS:
        folder = rows(out["folder"] / shift / "2", f"f-{shift}.db")
        assert len(folder) == 2
        assert rows(out["webdataset"] / shift / "2", f"w-{shift}.db") == folder
        assert rows(out["parquet"] / shift / "2", f"p-{shift}.db") == folder


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_worker_count_does_not_change_a_byte(outputs, tmp_path, layout):
    src, out = outputs
    generate(str(src), SHIFTS, [2], tmp_path / "two", seed=3, layout=layout, shard_samples=5, workers=2,
             shard_size=3)  # work units straddle the output shards
    assert tree_bytes(tmp_path / "two") == tree_bytes(out[layout])


def test_killed_generate_resumes_to_the_same_bytes(outputs, tmp_path):
    src, out = outputs
    target = tmp_path / "killed"
    code = (
        "import sys, time; sys.path[:0] = [%r, %r]\n"
        "import shiftbench.engine.generate as g\n"
        "import shiftbench.engine.generate.journal as j; orig = j.run_job\n"
        "def slow(job):\n    time.sleep(0.3); return orig(job)\n"
        "j.run_job = slow\n"
        "g.generate(%r, %r, [2], %r, seed=3, layout='webdataset', shard_samples=5, shard_size=2)\n"
    ) % (str(TESTS), str(TESTS.parent / "src"), str(src), SHIFTS, str(target))
    proc = subprocess.Popen([sys.executable, "-c", code])
    journal = target / "manifest.partial.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or journal.stat().st_size == 0):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal.exists() and not (target / "manifest.jsonl").exists()
    done = [json.loads(line) for line in journal.read_text().splitlines()]
    assert 0 < len(done) < 24
    blocks: dict[tuple[str, int], int] = {}
    for r in done:
        blocks[(r["shift"], r["index"] // 5)] = blocks.get((r["shift"], r["index"] // 5), 0) + 1
    assert all(size == (2 if k == 2 else 5) for (_, k), size in blocks.items())  # only whole shards journaled
    summary = generate(str(src), SHIFTS, [2], target, seed=3, layout="webdataset", shard_samples=5)
    assert summary["skipped"] == len(done) and summary["skipped"] + summary["written"] == 24
    assert list(target.rglob("*.part")) == []
    assert tree_bytes(target) == tree_bytes(out["webdataset"])


def test_cli_format_and_bad_input(outputs, tmp_path):
    from shiftbench.cli import cli

    src, out = outputs
    result = CliRunner().invoke(cli, ["generate", "--dataset", str(src), "--shift", ",".join(SHIFTS), "--severity",
                                      "2", "--seed", "3", "--out", str(tmp_path / "p"), "--format", "parquet",
                                      "--shard-samples", "5"])
    assert result.exit_code == 0, result.output
    assert tree_bytes(tmp_path / "p") == tree_bytes(out["parquet"])
    result = CliRunner().invoke(cli, ["generate", "--dataset", str(src), "--shift", "pixelate", "--out",
                                      str(tmp_path / "j"), "--format", "jpeg", "--limit", "2"])
    assert result.exit_code == 0, result.output  # the older meaning: a folder of JPEGs
    assert len(list((tmp_path / "j").rglob("*.jpg"))) == 2
    with pytest.raises(ShiftbenchError, match="expected one of folder, webdataset, parquet"):
        generate(str(src), ["pixelate"], [2], tmp_path / "x", layout="zip")
    with pytest.raises(ShiftbenchError, match="shard_samples must be a positive int"):
        generate(str(src), ["pixelate"], [2], tmp_path / "x", layout="webdataset", shard_samples=0)


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_ray_engine_writes_the_local_engines_shards(ray_cluster, tmp_path, layout):
    import tiny_registry  # noqa: F401  (_test_tiny, _test_noise, and _test_modeled: a shift run on actors)

    shifts = ["_test_noise", "_test_modeled"]
    generate("_test_tiny", shifts, [1, 4], tmp_path / "local", seed=3, layout=layout, shard_samples=6)
    out = tmp_path / "ray"
    summary = generate("_test_tiny", shifts, [1, 4], out, seed=3, workers=2, engine="ray", shard_size=4,
                       layout=layout, shard_samples=6)
    assert summary == {"written": 80, "skipped": 0, "total": 80, "unreadable": 0}
    assert tree_bytes(out) == tree_bytes(tmp_path / "local")
    assert len(list(out.rglob("*.tar" if layout == "webdataset" else "*.parquet"))) == 2 * 2 * 4  # 20 = 6+6+6+2
