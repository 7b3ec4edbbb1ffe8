"""benchmarks/gpu.py in its dry run (tiny sizes and models, CPU): every corruption timed through both paths,
both inpainting modes timed, the JSON written; without a torch path the corruptions say so and part B still runs."""

from __future__ import annotations

import json

import pytest

from conftest import load_benchmark

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_dry_run_measures_every_corruption_and_both_inpainting_modes(tmp_path):
    from shiftbench.shifts.corruptions import CORRUPTION_GROUPS, Corruption

    bench = load_benchmark("gpu")
    out = tmp_path / "gpu.json"
    result = bench.main(["--dry-run", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))
    assert saved["dry_run"] and saved["environment"]["device"] == "cpu"
    assert saved["environment"]["torch"] == torch.__version__ and saved["wall_s"] > 0

    a = saved["part_a"]
    assert (a["batch"], a["size"], a["severity"]) == (4, 64, 3)
    assert [r["name"] for r in a["rows"]] == CORRUPTION_GROUPS["all"]
    assert all(r["numpy_img_s"] > 0 for r in a["rows"])
    if hasattr(Corruption, "apply_tensor"):
        assert a["torch_path"] and a["unavailable"] is None
        for r in a["rows"]:
            assert "torch_error" not in r, r
            assert r["torch_img_s"] > 0 and r["speedup"] == pytest.approx(r["torch_img_s"] / r["numpy_img_s"])
            assert 0 <= r["max_abs_diff"] <= 255

    b = saved["part_b"]
    assert (b["model"], b["size"], b["steps"]) == ("tiny", 64, 2)
    assert [(r["mode"], r["dtype"]) for r in b["rows"]] == [("reference", "float32"), ("ours", "float32")]
    for r in b["rows"]:
        assert r["s_per_image"] > 0 and r["img_s"] == pytest.approx(1 / r["s_per_image"]), r
    assert b["rows"][0]["speedup"] == pytest.approx(1.0)


def test_without_a_torch_path_the_corruptions_say_so(monkeypatch):
    from shiftbench.shifts.corruptions import Corruption

    bench = load_benchmark("gpu")
    if hasattr(Corruption, "apply_tensor"):
        monkeypatch.delattr(Corruption, "apply_tensor")
    part = bench.corruption_rows(["brightness", "gaussian_noise"], 2, 64, "cpu", 0.0, 1, bench.Deadline(60))
    assert not part["torch_path"] and "apply_tensor does not exist" in part["unavailable"]
    assert [sorted(r) for r in part["rows"]] == [["name", "numpy_calls", "numpy_img_s"]] * 2
    assert "| brightness | – |" in bench.markdown({"environment": {"device": "cpu", "device_name": "x", "torch": "t",
                                                                      "diffusers": "d"}, "dry_run": True, "wall_s": 1.0,
                                                     "part_a": part})


def test_the_time_limit_skips_what_is_left_and_says_so():
    bench = load_benchmark("gpu")
    part = bench.corruption_rows(["brightness"], 2, 64, "cpu", 0.0, 1, bench.Deadline(-1))
    assert part["rows"] == [{"name": "brightness", "skipped": "time limit (-1 s) reached"}]
