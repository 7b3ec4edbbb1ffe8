"""`shiftbench generate`: outputs, manifest, resume after interruption, worker invariance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiny_registry  # noqa: F401  (registers _test_tiny and _test_noise)
from shiftbench.engine.generate import generate, parse_severities, resolve_shifts
from shiftbench.errors import SeverityError, ShiftbenchError
from shiftbench.sample import load_image

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_outputs_and_manifest(tmp_path):
    out = tmp_path / "out"
    summary = generate("_test_tiny", ["_test_noise"], [1, 3], out, seed=5)
    assert summary == {"written": 40, "skipped": 0, "total": 40, "unreadable": 0}
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 40 and not (out / "manifest.partial.jsonl").exists()
    r = records[0]
    assert r["shift"] == "_test_noise" and r["severity"] == 1 and r["seed"] == 5 and r["format"] == "png"
    assert r["output"] == "_test_noise/1/class0/img000.png" and r["source"] == "class0/img000.png"
    # each output is exactly the shift replayed from its recorded params
    from shiftbench.registry import SHIFTS
    from tiny_registry import TinyDataset

    shift = SHIFTS.create("_test_noise")
    for rec in records[::7]:
        expected = shift.replay(TinyDataset().load(rec["index"]), rec["params"]).image
        assert np.array_equal(load_image(out / rec["output"]), expected)


def test_workers_do_not_change_a_byte(tmp_path):
    generate("_test_tiny", ["_test_noise"], [2, 5], tmp_path / "a", seed=1, workers=1)
    generate("_test_tiny", ["_test_noise"], [2, 5], tmp_path / "b", seed=1, workers=2)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")


def test_resume_after_kill_is_byte_identical(tmp_path):
    reference = tmp_path / "ref"
    generate("_test_tiny", ["_test_noise"], [1, 2, 3, 4, 5], reference, seed=2)
    out = tmp_path / "killed"
    code = (
        "import sys, time; sys.path[:0] = [%r, %r]\n"
        "import tiny_registry, shiftbench.engine.generate as g\n"
        "import shiftbench.engine.generate.journal as j; orig = j.run_job\n"
        "def slow(job):\n    time.sleep(0.05); return orig(job)\n"
        "j.run_job = slow\n"
        "g.generate('_test_tiny', ['_test_noise'], [1, 2, 3, 4, 5], %r, seed=2)\n"
    ) % (str(TESTS), str(TESTS.parent / "src"), str(out))
    proc = subprocess.Popen([sys.executable, "-c", code])
    journal = out / "manifest.partial.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or journal.stat().st_size < 2000):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal.exists() and not (out / "manifest.jsonl").exists()
    with open(journal, "ab") as fh:  # a torn last line, as a kill mid-write would leave
        fh.write(b'{"index": 3, "shi')
    summary = generate("_test_tiny", ["_test_noise"], [1, 2, 3, 4, 5], out, seed=2)
    assert summary["skipped"] > 0 and summary["written"] < 100
    assert summary["skipped"] + summary["written"] == 100
    assert list(out.rglob("*.part")) == []  # temp files of the killed process are cleaned
    assert tree_bytes(out) == tree_bytes(reference)


def test_text_shift_records_texts(tmp_path):
    from shiftbench.registry import SHIFTS
    from shiftbench.shifts.base import TextShift

    class Shout(TextShift):
        name = "_test_shout"

        def text_params(self, text, severity, rng):
            return {"k": int(rng.integers(1, 1 + len(text.split())))}

        def apply_text(self, text, params):
            words = text.split()
            return " ".join(w.upper() if i < params["k"] else w for i, w in enumerate(words))

    if "_test_shout" not in SHIFTS:
        SHIFTS.add("_test_shout", Shout, group="_testtext")
    generate("_test_tiny", ["_test_shout"], [2], tmp_path / "t", seed=0, limit=5)
    records = [json.loads(line) for line in (tmp_path / "t" / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 5 and all("output" not in r for r in records)
    assert records[0]["text"].lower() == "picture number 0 of a cat" and records[0]["text"] != "picture number 0 of a cat"


def test_settings_change_refused_and_bad_input(tmp_path):
    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "o", seed=0, limit=3)
    with pytest.raises(ShiftbenchError, match="other settings"):
        generate("_test_tiny", ["_test_noise"], [1], tmp_path / "o", seed=1, limit=3)
    with pytest.raises(SeverityError, match="outside 1..5"):
        generate("_test_tiny", ["_test_noise"], [6], tmp_path / "p")
    with pytest.raises(ShiftbenchError, match="did you mean"):
        resolve_shifts(["_test_nois"])
    assert resolve_shifts(["_testgroup", "_test_noise"]) == ["_test_noise"]
    assert parse_severities("1-3,5") == [1, 2, 3, 5]
    with pytest.raises(ShiftbenchError):
        parse_severities("x")
    with pytest.raises(ShiftbenchError, match="neither a registered dataset"):
        generate("/no/such/dataset", ["_test_noise"], [1], tmp_path / "q")


def test_jpeg_is_recorded_as_lossy(tmp_path):
    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "j", fmt="jpeg", jpeg_quality=80, limit=2)
    rec = json.loads((tmp_path / "j" / "manifest.jsonl").read_text().splitlines()[0])
    assert rec["output"].endswith(".jpg") and "lossy" in rec["format"] and "80" in rec["format"]


def test_corruption_groups_expand():
    assert len(resolve_shifts(["all"])) == 19
    assert len(resolve_shifts(["common"])) == 15
    assert resolve_shifts(["noise"]) == ["gaussian_noise", "shot_noise", "impulse_noise"]
    assert resolve_shifts(["blur,noise"])[:4] == ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"]
    assert set(resolve_shifts(["text"])) == {"text_swap", "text_qwerty", "text_remove_char", "text_remove_space",
                                             "text_misspelling", "text_repetition", "text_homophone"}


def test_generate_real_corruptions_on_an_image_folder(tmp_path):
    """A folder in, the same layout out, every output equal to the corruption replayed from the manifest."""
    from PIL import Image

    import shiftbench as sb
    from conftest import make_image

    src = tmp_path / "data"
    for cls in ("n01440764", "n01443537"):
        (src / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(make_image(48 + 8 * i, 64, seed=i)).save(src / cls / f"img{i}.png")
    summary = generate(str(src), resolve_shifts(["noise", "glass_blur"]), [1, 5], tmp_path / "out", workers=2)
    assert summary["written"] == 4 * 2 * 6
    records = [json.loads(x) for x in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    data = sb.load_dataset(str(src))
    by_id = {data.sample_id(i): i for i in range(len(data))}
    for rec in records[::5]:
        assert rec["output"].startswith(f"{rec['shift']}/{rec['severity']}/n014")
        sample = data.load(by_id[rec["id"]])
        expected = sb.create_shift(rec["shift"]).replay(sample, rec["params"]).image
        assert np.array_equal(load_image(tmp_path / "out" / rec["output"]), expected)


# -- the layout (issue 13, item 6): the source tree mirrored, never an overwrite, readable back ---------

def _wnid_folder(root: Path, per_class: int = 4) -> Path:
    from PIL import Image

    from conftest import make_image

    for c, cls in enumerate(("n01440764", "n01443537", "n01484850")):
        (root / cls / "sub").mkdir(parents=True)
        for i in range(per_class):
            where = root / cls / ("sub" if i == 0 else "")
            Image.fromarray(make_image(40 + 4 * i, 56, seed=10 * c + i)).save(where / f"img{i}.jpg", quality=95)
    return root


def test_generate_mirrors_the_tree_and_refuses_collisions_before_any_work(tmp_path):
    import shiftbench as sb

    src = _wnid_folder(tmp_path / "data")
    generate(str(src), ["_test_noise"], [2], tmp_path / "out")
    made = sorted(p.relative_to(tmp_path / "out" / "_test_noise" / "2").as_posix()
                  for p in (tmp_path / "out" / "_test_noise" / "2").rglob("*") if p.is_file())
    source = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    assert made == [s[:-4] + ".png" for s in source]
    back = sb.load_dataset(str(tmp_path / "out" / "_test_noise" / "2"))  # detected as an image folder again
    original = sb.load_dataset(str(src))
    assert len(back) == len(original) and back.class_names == original.class_names
    assert [back.load(i).label for i in range(len(back))] == [original.load(i).label for i in range(len(original))]

    (src / "n01443537" / "img1.png").write_bytes((tmp_path / "out" / "_test_noise" / "2" / made[0]).read_bytes())
    with pytest.raises(ShiftbenchError, match="n01443537/img1.jpg and n01443537/img1.png would both be written") as info:
        generate(str(src), ["_test_noise"], [2], tmp_path / "second")
    assert "never overwritten" in str(info.value)
    assert not (tmp_path / "second").exists()  # refused before any work: not even the folder


def test_evaluating_a_generated_folder_equals_the_shift_on_the_fly(tmp_path):
    import shiftbench as sb

    src = _wnid_folder(tmp_path / "data", per_class=5)
    generate(str(src), ["gaussian_noise"], [3], tmp_path / "out", seed=4)
    shifted = tmp_path / "out" / "gaussian_noise" / "3"
    # PNG is lossless: every generated image is the on-the-fly shifted image, pixel for pixel
    shift = sb.create_shift("gaussian_noise")
    original, back = sb.load_dataset(str(src)), sb.load_dataset(str(shifted))
    for i in range(len(original)):
        expected = shift(original.load(i), severity=3, seed=4).image
        assert np.array_equal(back.load(i).image, expected)

    def spec(dataset, shifts):
        return {"dataset": str(dataset), "models": ["dummy_classifier"], "shifts": shifts,
                "metrics": ["top1", "ece"], "seed": 4, "batch_size": 4}

    fly = sb.evaluate(spec(src, [{"name": "gaussian_noise", "severities": [3]}]), store=tmp_path / "fly.db")
    read = sb.evaluate(spec(shifted, ["clean"]), store=tmp_path / "read.db")
    on_the_fly = {r["metric"]: (r["value"], r["n"]) for r in fly if r["shift"] == "gaussian_noise"}
    from_disk = {r["metric"]: (r["value"], r["n"]) for r in read if r["shift"] == "clean"}
    assert on_the_fly == from_disk and set(on_the_fly) == {"top1", "ece"}


def test_generated_root_is_named_for_what_it_is(tmp_path):
    import shiftbench as sb

    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "out", limit=4)
    with pytest.raises(ShiftbenchError, match="shiftbench generate output.*_test_noise/1"):
        sb.load_dataset(str(tmp_path / "out"))


def test_a_sample_the_shift_fails_on_is_named_by_the_local_engine_too(tmp_path, caplog):
    with pytest.raises(ShiftbenchError, match=r"shift '_test_modeled' \(severity 3\) failed on sample img012: "
                                              r"RuntimeError: cannot paint img012$"):
        generate("_test_tiny", ["_test_modeled"], [3], tmp_path / "a", workers=2, shard_size=3,
                 shift_params={"fail_on": "img012"})
    # the shards that finished (the others were running or done when it failed) are in the journal
    journal = [json.loads(line) for line in (tmp_path / "a" / "manifest.partial.jsonl").read_text().splitlines()]
    assert journal and "img012" not in {r["id"] for r in journal}
    assert all((tmp_path / "a" / r["output"]).exists() for r in journal)
    with caplog.at_level("WARNING", logger="shiftbench"):
        summary = generate("_test_tiny", ["_test_modeled"], [3], tmp_path / "b", on_error="skip",
                           shift_params={"fail_on": "img012"})
    assert summary["written"] == 19 and summary["unreadable"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        "skipped sample img012 (shift '_test_modeled', severity 3): RuntimeError: cannot paint img012"]
