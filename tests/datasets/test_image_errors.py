"""Unreadable images end as one line naming the file (never a traceback); on_error: skip through the CLI.

A folder with a truncated JPEG (its header is fine), a text file named .png and a PNG whose header
claims more pixels than Pillow's decompression-bomb guard allows: `evaluate` and `generate` fail with
exit 2 and one line naming the files, or skip them with one log line and a record in the store /
manifest.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shiftbench.datasets.common import check_image_file
from shiftbench.errors import ImageError
from shiftbench.results.store import Store
from shiftbench.sample import load_image

from conftest import make_image

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"
CLASSES = ("n01440764", "n01443537")
BAD = ("n01440764/cut.jpg", "n01443537/notes.png", "n01443537/bomb.png")


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A valid 1x1 PNG whose IHDR claims ``width`` x ``height`` (CRC fixed): Pillow refuses it on open."""
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = 8  # after the signature: length(4) type(4) data(13) crc(4)
    data[ihdr + 8:ihdr + 16] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[ihdr + 4:ihdr + 21])) & 0xFFFFFFFF
    data[ihdr + 21:ihdr + 25] = struct.pack(">I", crc)
    return bytes(data)


def make_folder(root: Path, bad: bool = True) -> Path:
    for c, cls in enumerate(CLASSES):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(make_image(40, 48, seed=10 * c + i)).save(root / cls / f"img{i}.png")
    if bad:
        buf = io.BytesIO()
        Image.fromarray(make_image(64, 64, seed=99)).save(buf, format="JPEG", quality=90)
        (root / BAD[0]).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])  # header fine, data cut
        (root / BAD[1]).write_text("these are my notes, not a picture\n")
        (root / BAD[2]).write_bytes(bomb_png())
    return root


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC)]), COLUMNS="200")
    code = "import sys; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def write_spec(path: Path, data: Path, extra: str = "") -> Path:
    path.write_text(f"dataset: {data}\nmodels: [dummy_classifier]\nshifts: [{{name: gaussian_noise, severities: [2]}}]\n"
                    f"metrics: [top1]\nbatch_size: 4\n{extra}")
    return path


# -- the library: every decoder exception is one ImageError naming the file ------------------------

def test_each_bad_file_gives_a_reason_naming_it(tmp_path):
    make_folder(tmp_path)
    assert check_image_file(tmp_path / BAD[0], "header") is None  # only decoding finds the cut
    assert "truncated" in check_image_file(tmp_path / BAD[0], "full")
    assert "not a readable image" in check_image_file(tmp_path / BAD[1], "header")
    assert "decompression-bomb" in check_image_file(tmp_path / BAD[2], "header")
    for name in BAD:
        with pytest.raises(ImageError) as info:
            load_image(tmp_path / name)
        assert str(info.value).startswith(str(tmp_path / name) + ": ") and "\n" not in str(info.value)


@pytest.mark.parametrize("exc", [
    Image.DecompressionBombError("too many pixels"), Image.DecompressionBombWarning("many pixels"),
    OSError("broken data stream"), ValueError("tile cannot extend outside image"), SyntaxError("not a PNG"),
    struct.error("unpack requires a buffer"), EOFError(), IndexError("list index out of range"),
    MemoryError(), KeyError("PLTE"), ZeroDivisionError("division by zero"),
])
def test_any_exception_of_the_image_library_becomes_one_line(tmp_path, monkeypatch, exc):
    path = make_folder(tmp_path, bad=False) / CLASSES[0] / "img0.png"

    def refuse(*args, **kwargs):
        raise exc

    monkeypatch.setattr(Image, "open", refuse)
    with pytest.raises(ImageError) as info:
        load_image(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    reason = check_image_file(path, "header")
    assert reason and reason in str(info.value)


# -- evaluate through the CLI ----------------------------------------------------------------------

def test_evaluate_fails_before_any_work_naming_every_bad_file(tmp_path):
    data = make_folder(tmp_path / "data")
    spec = write_spec(tmp_path / "s.yaml", data)
    out = cli("evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: 3 unreadable image(s)") and "Traceback" not in out.stderr
    for name in BAD:
        assert name in lines[0]
    assert "decompression-bomb" in lines[0] and "truncated" in lines[0]


@pytest.mark.parametrize("how", ["flag", "spec"])
def test_evaluate_skips_with_one_log_line_and_a_store_record(tmp_path, how):
    data = make_folder(tmp_path / "data")
    spec = write_spec(tmp_path / "s.yaml", data, "on_error: skip\n" if how == "spec" else "")
    db = tmp_path / "r.db"
    args = ["evaluate", "--config", str(spec), "--store", str(db), "--results-json", str(tmp_path / "r.json")]
    out = cli(*args, *(["--on-error", "skip"] if how == "flag" else []))
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "skipped 3 unreadable image(s)" in warnings[0]
    assert "UserWarning" not in out.stderr and "Traceback" not in out.stderr
    rows = json.loads((tmp_path / "r.json").read_text())
    assert {r["n"] for r in rows} == {6}  # the six good images, every condition
    with Store(db, create=False) as store:
        run_id = store.runs()[0]["run_id"]
        (artifact,) = store.artifacts(run_id, "skipped.json")
    skipped = json.loads(artifact["data"])
    assert sorted(s["file"] for s in skipped) == sorted(BAD) and all(s["reason"] for s in skipped)
    # and the same images without the bad files give the same rows: nothing else was dropped
    clean = make_folder(tmp_path / "clean", bad=False)
    reference = cli("evaluate", "--config", str(write_spec(tmp_path / "c.yaml", clean)), "--store",
                    str(tmp_path / "c.db"), "--results-json", str(tmp_path / "c.json"))
    assert reference.returncode == 0, reference.stderr
    key = lambda r: (r["shift"], r["severity"], r["metric"])  # noqa: E731
    assert {key(r): r["value"] for r in rows} == {key(r): r["value"] for r in json.loads((tmp_path / "c.json").read_text())}
    # the report's provenance names the skipped files and the weights that decided the numbers
    report = cli("report", "--store", str(db), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert "skipped files" in html and all(name in html for name in BAD)
    assert "weights of dummy_classifier" in html and "6 samples; files 9, fingerprint" in html


# -- generate through the CLI ----------------------------------------------------------------------

def test_generate_fails_naming_the_bad_files_and_writes_nothing(tmp_path):
    data = make_folder(tmp_path / "data")
    out = cli("generate", "--dataset", str(data), "--shift", "gaussian_noise", "--severity", "2",
              "--out", str(tmp_path / "g"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for name in BAD[1:]:  # the header screen names these before any work
        assert name in lines[0]
    assert not any(p.suffix == ".png" for p in (tmp_path / "g").rglob("*"))


def test_generate_skips_with_log_lines_and_manifest_records(tmp_path):
    data = make_folder(tmp_path / "data")
    out = cli("generate", "--dataset", str(data), "--shift", "gaussian_noise", "--severity", "2",
              "--out", str(tmp_path / "g"), "--on-error", "skip")
    assert out.returncode == 0, out.stderr
    assert "UserWarning" not in out.stderr and "Traceback" not in out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert all(len(w) < 1000 for w in warnings) and 1 <= len(warnings) <= 2
    assert all(name in "\n".join(warnings) for name in BAD)
    records = [json.loads(x) for x in (tmp_path / "g" / "manifest.jsonl").read_text().splitlines()]
    skipped = {r.get("source") or r["id"]: r["skipped"] for r in records if "skipped" in r}
    assert sorted(skipped) == sorted(BAD)
    outputs = sorted(r["output"] for r in records if "output" in r)
    assert len(outputs) == 6 and all((tmp_path / "g" / o).is_file() for o in outputs)
    assert "3 unreadable" in out.stdout


def test_generate_python_api_takes_on_error(tmp_path):
    from shiftbench.engine.generate import generate

    data = make_folder(tmp_path / "data")
    with pytest.raises(ImageError, match="notes.png"):
        generate(str(data), ["gaussian_noise"], [1], tmp_path / "a")
    summary = generate(str(data), ["gaussian_noise"], [1], tmp_path / "b", on_error="skip")
    assert summary["written"] == 6 and summary["unreadable"] == 3
    produced = sorted(p.relative_to(tmp_path / "b").as_posix() for p in (tmp_path / "b").rglob("*.png"))
    assert produced == [f"gaussian_noise/1/{c}/img{i}.png" for c in CLASSES for i in range(3)]
    assert np.asarray(Image.open(tmp_path / "b" / produced[0])).shape == (40, 48, 3)
