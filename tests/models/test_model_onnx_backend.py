"""The bundled EfficientNets' ONNX Runtime forward pass equals the torch module's, and is cached on disk."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_onnxruntime_matches_torch(variant, tmp_path, monkeypatch):
    monkeypatch.setenv("SHIFTBENCH_CACHE", str(tmp_path))
    data = sb.load_dataset("objects", limit=12)
    images = [data.load(i).image for i in range(len(data))]
    fast = sb.create_model(f"efficientnet_lite{variant}")
    ref = sb.create_model(f"efficientnet_lite{variant}", backend="torch")
    assert fast.backend == "onnxruntime" and ref.backend == "torch"
    a, b = fast.predict_logits(images), ref.predict_logits(images)
    assert a.shape == b.shape == (12, 1000)
    assert np.abs(a - b).max() < 1e-3
    assert (a.argmax(1) == b.argmax(1)).all()
    assert len(list((tmp_path / "onnx").glob(f"efficientnet_lite{variant}-*.onnx"))) == 1
    again = sb.create_model(f"efficientnet_lite{variant}")  # reuses the cached export
    assert np.allclose(again.predict_logits(images[:3]), a[:3], atol=1e-5)
    assert fast.info()["backend"] == "onnxruntime"


def test_backend_choice_is_checked():
    from shiftbench.errors import ShiftbenchError

    with pytest.raises(ShiftbenchError, match="backend must be"):
        sb.create_model("efficientnet_lite0", backend="tensorrt")
    with pytest.raises(ShiftbenchError, match="float32"):
        sb.create_model("efficientnet_lite0", dtype="bfloat16", backend="onnxruntime")
    assert sb.create_model("efficientnet_lite0", dtype="bfloat16").backend == "torch"
