"""benchmarks/peers.py: every corruption with a peer is timed against albumentations and kornia at each
size, with the uint8 floor and the fitted size exponent; the peers' transforms build and run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import load_benchmark


def _bench():
    return load_benchmark("peers")


def test_every_peer_transform_builds_and_runs():
    pytest.importorskip("albumentations")
    torch = pytest.importorskip("torch")
    bench = _bench()
    image = bench.photos(64)[0]
    for name, build in bench.albumentations_peers().items():
        out = build()(image=image)["image"]
        assert out.shape == image.shape and out.dtype == np.uint8, name
    batch = torch.from_numpy(np.stack(bench.photos(64)[:2])).permute(0, 3, 1, 2).float() / 255
    for name, build in bench.kornia_peers().items():
        out = build()(batch)
        assert tuple(out.shape) == tuple(batch.shape), name


def test_tiny_run_writes_the_table_and_json(tmp_path):
    pytest.importorskip("albumentations")
    pytest.importorskip("kornia")
    bench = _bench()
    out = tmp_path / "peers.json"
    result = bench.main(["--sizes", "48", "96", "--names", "brightness", "gaussian_noise", "shot_noise",
                         "--budget", "0", "--min-calls", "2", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["rows"] == json.loads(json.dumps(result["rows"]))
    assert [(r["name"], r["size"]) for r in saved["rows"]] == [
        (n, s) for s in (48, 96) for n in ("brightness", "gaussian_noise", "shot_noise")]
    for r in saved["rows"]:
        peers = [r[lib]["median_ms"] for lib in ("albumentations", "kornia") if r.get(lib)]
        assert r["fastest_peer_ms"] == min(peers)
        assert r["ratio_to_fastest_peer"] == pytest.approx(r["shiftbench"]["median_ms"] / min(peers))
        assert r["ratio_to_floor"] == pytest.approx(r["shiftbench"]["median_ms"] / saved["floor_ms"][str(r["size"])])
    assert saved["rows"][2]["kornia"] is None  # shot noise has no kornia transform
    assert set(saved["exponent"]) == {"brightness", "gaussian_noise", "shot_noise"}
    # the exponent is the log-log slope: time x4 for pixels x4 is 1.0
    assert bench.exponent([100, 200], [1.0, 4.0]) == pytest.approx(1.0)
    assert bench.exponent([100], [1.0]) is None
