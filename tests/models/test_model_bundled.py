"""Bundled real models on real photos (scikit-image's bundled photographs), checked by eye and recorded here.

Seen by eye when writing this test (top-5, EfficientNet-Lite0): chelsea (a tabby cat) -> tiger cat,
Egyptian Mau, tabby cat, lynx, window screen; coffee (an espresso cup) -> espresso, tea cup, consomme,
chocolate syrup, coffee mug; rocket (a launch pad) -> missile, missile, drilling rig, space shuttle,
mosque. U2-Net-p on coffee: the cup and saucer white, the table black.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import shiftbench as sb

skimage_data = pytest.importorskip("skimage.data")
torch = pytest.importorskip("torch")

DOMESTIC_CATS = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian Mau
ESPRESSO = 967
ROCKETS = {657, 744, 812}  # missile, projectile/missile, space shuttle


@pytest.fixture(scope="module")
def photos():
    return [skimage_data.chelsea(), skimage_data.coffee(), skimage_data.rocket()]


_MODELS: dict[int, object] = {}


@pytest.fixture(scope="module", params=[0, 1, 2])
def efficientnet(request):
    if request.param not in _MODELS:
        _MODELS[request.param] = sb.create_model(f"efficientnet_lite{request.param}")
    return _MODELS[request.param]


@pytest.fixture(scope="module")
def lite0():
    if 0 not in _MODELS:
        _MODELS[0] = sb.create_model("efficientnet_lite0")
    return _MODELS[0]


def test_efficientnet_real_photos(efficientnet, photos):
    logits = efficientnet.predict_logits(photos)
    assert logits.shape == (3, 1000) and logits.dtype == np.float32
    top5 = np.argsort(-logits, axis=1)[:, :5]
    assert top5[0, 0] in DOMESTIC_CATS and len(DOMESTIC_CATS & set(top5[0])) >= 3
    assert top5[1, 0] == ESPRESSO
    assert ROCKETS & set(top5[2])
    names = efficientnet.label_space.class_names
    assert "cat" in names[top5[0, 0]] or names[top5[0, 0]] == "Egyptian Mau"


def test_efficientnet_declared_preprocessing_and_info(efficientnet):
    size = {0: 224, 1: 240, 2: 260}[efficientnet.variant]
    p = efficientnet.preprocess
    assert p.size == (size, size) and p.mean == (127.0,) * 3 and p.std == (128.0,) * 3 and p.value_range == 255
    assert p.crop_fraction == pytest.approx(size / (size + 32))
    info = json.loads(json.dumps(efficientnet.info()))
    assert info["label_space"] == {"name": "imagenet1k", "num_classes": 1000}
    assert info["device"] == "cpu" and info["dtype"] == "float32"


def test_batch_equals_items_and_tensor_paths_agree(photos, lite0):
    model = lite0
    batch = model.predict_logits(photos[:2])
    one = np.concatenate([model.predict_logits([p]) for p in photos[:2]])
    assert np.allclose(batch, one, atol=1e-4)
    x = model.preprocess_tensor(photos[:1])
    assert tuple(x.shape) == (1, 3, 224, 224)
    with torch.no_grad():
        assert np.allclose(model.forward(x).numpy(), batch[:1], atol=1e-5)


def test_differentiable_path_gives_input_gradients(photos, lite0):
    model = lite0
    x01 = torch.from_numpy(photos[0].astype(np.float32) / 255).permute(2, 0, 1)[None].requires_grad_(True)
    logits = model.forward_images(x01)
    assert int(logits.argmax()) in DOMESTIC_CATS
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([281]))
    loss.backward()
    assert x01.grad is not None and x01.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in model.module.parameters())  # weights stay frozen


def test_u2netp_is_shipped_with_its_sources_and_hash(monkeypatch, tmp_path):
    """The ONNX file is package data (no extra wheel), byte for byte the one SOURCES.md names."""
    import hashlib
    import re

    from shiftbench.models import u2net

    monkeypatch.delenv(u2net.ENV_VAR, raising=False)
    path = u2net.find_u2netp()
    assert path == u2net.SHIPPED and path.parent.name == "u2netp"
    sources = (path.parent / "SOURCES.md").read_text()
    listed = re.search(r"SHA-256 of `u2netp.onnx`: `([0-9a-f]{64})`", sources).group(1)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == listed
    assert "Apache License" in (path.parent / "LICENSE.U-2-Net-Apache-2.0").read_text()
    # a user's copy overrides the shipped one; a wrong path is one clear error
    copy = tmp_path / "mine.onnx"
    copy.write_bytes(path.read_bytes())
    monkeypatch.setenv(u2net.ENV_VAR, str(copy))
    assert u2net.find_u2netp() == copy
    monkeypatch.setenv(u2net.ENV_VAR, str(tmp_path / "absent.onnx"))
    with pytest.raises(sb.ShiftbenchError, match="SHIFTBENCH_U2NETP=.*absent.onnx is not a file"):
        u2net.find_u2netp()


def test_u2netp_salient_object_on_a_real_photo():
    model = sb.create_model("u2netp")
    coffee = skimage_data.coffee()  # 400x600: cup and saucer in the middle, wooden table around
    small = coffee[::2, ::2]
    probs = model.predict([coffee, small])
    assert probs[0].shape == coffee.shape[:2] and probs[1].shape == small.shape[:2]
    prob = probs[0]
    assert prob.dtype == np.float32 and 0.0 <= prob.min() and prob.max() <= 1.0
    assert prob[150:250, 250:350].mean() > 0.9  # the cup
    for corner in (prob[:40, :40], prob[:40, -40:], prob[-40:, :40]):
        assert corner.mean() < 0.1  # the table
    mask = model.predict_masks([coffee])[0]
    assert set(np.unique(mask)) == {0, 1} and 0.2 < mask.mean() < 0.7
    assert model.class_agnostic and model.label_space.name == "foreground"


def test_efficientnet_in_bfloat16_agrees_on_the_photo(photos, lite0):
    half = sb.create_model("efficientnet_lite0", dtype="bfloat16")
    assert half.dtype == "bfloat16" and half.info()["dtype"] == "bfloat16"
    logits = half.predict_logits(photos[:1])
    assert logits.dtype == np.float32  # outputs are float32 whatever the compute dtype
    assert logits.argmax() == lite0.predict_logits(photos[:1]).argmax()
    with pytest.raises(sb.ShiftbenchError, match="dtype"):
        sb.create_model("efficientnet_lite0", dtype="int8")
