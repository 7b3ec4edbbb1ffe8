"""timm and open_clip adapters: the adapter logic on tiny torch modules shaped like theirs, the factories
on real tiny models when timm / open_clip import (they need torchvision), the error when they do not."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
import tiny_hub
from shiftbench.models.open_clip_models import OpenClipZeroShot, parse_source, preprocess_from_open_clip
from shiftbench.models.timm_models import TimmClassifier, label_space_from_config, preprocess_from_data_config

torch = pytest.importorskip("torch")


class TinyNet(torch.nn.Module):
    """Conv + global pool + linear head, with timm's ``num_classes`` / ``pretrained_cfg`` attributes."""

    def __init__(self, num_classes: int, pretrained_cfg: dict | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, num_classes)
        self.num_classes = num_classes
        self.pretrained_cfg = pretrained_cfg or {}

    def forward(self, x):
        return self.head(self.conv(x).relu().mean(dim=(2, 3)))


DATA_CONFIG = {"input_size": (3, 24, 24), "interpolation": "bilinear", "mean": (0.485, 0.456, 0.406),
               "std": (0.229, 0.224, 0.225), "crop_pct": 0.75, "crop_mode": "center"}


def test_timm_data_config_becomes_declared_preprocessing():
    p = preprocess_from_data_config(DATA_CONFIG)
    assert p.size == (24, 24) and p.crop_fraction == 0.75 and p.interpolation == "bilinear" and p.value_range == 1.0
    assert preprocess_from_data_config(dict(DATA_CONFIG, crop_mode="squash")).resize == "exact"
    with pytest.raises(ShiftbenchError, match="crop_mode"):
        preprocess_from_data_config(dict(DATA_CONFIG, crop_mode="border"))
    assert label_space_from_config(1000, {"tag": "a1_in1k"}, "x").name == "imagenet1k"
    assert label_space_from_config(1000, {}, "x").name == "x"  # a class count alone is not ImageNet
    assert label_space_from_config(2, {"label_names": ["a", "b"]}, "x").class_names == ("a", "b")
    assert label_space_from_config(5, {}, "x").num_classes == 5


def test_timm_classifier_adapter_on_a_tiny_module():
    net = TinyNet(5)
    model = TimmClassifier(net, DATA_CONFIG, "timm:tiny")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (40, 30, 3), dtype=np.uint8), rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)]
    logits = model.predict_logits(images)
    assert logits.shape == (2, 5) and model.label_space.num_classes == 5
    # reference: crop the centre 75% of the shorter side by hand, resize, normalise, run the module
    p = model.preprocess
    top, left, h, w = p.crop_box(40, 30)
    assert (h, w) == (22, 22)
    x = torch.from_numpy(p(images[:1]))
    with torch.no_grad():
        assert np.allclose(net(x).numpy(), logits[:1], atol=1e-5)
    assert np.allclose(model.predict_logits(images[1:]), logits[1:], atol=1e-5)
    with pytest.raises(ShiftbenchError, match="no classification head"):
        TimmClassifier(TinyNet(0), DATA_CONFIG, "timm:headless")


def test_open_clip_zero_shot_adapter_on_a_tiny_model():
    clip, _tokenize = tiny_hub.tiny_open_clip()
    model = OpenClipZeroShot(clip, _tokenize, "open_clip:tiny/none", classes=["cat", "dog", "car"],
                             templates=["a photo of a {}.", "a {}."])
    assert model.preprocess.size == (20, 20) and model.preprocess.crop_fraction == 1.0
    assert model.logit_scale == pytest.approx(50.0)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (30, 44, 3), dtype=np.uint8)]
    logits = model.predict_logits(images)
    with torch.no_grad():
        img = torch.nn.functional.normalize(clip.encode_image(torch.from_numpy(model.preprocess(images))), dim=-1)
        classes = []
        for c in ["cat", "dog", "car"]:
            t = torch.nn.functional.normalize(clip.encode_text(_tokenize([f"a photo of a {c}.", f"a {c}."])), dim=-1).mean(0)
            classes.append(t / t.norm())
        expected = 50.0 * img @ torch.stack(classes).T
    assert np.allclose(logits, expected.numpy(), atol=1e-4)
    assert OpenClipZeroShot(clip, _tokenize, "open_clip:tiny/none").label_space.name == "imagenet1k"


def test_open_clip_source_parsing_and_preprocess(tmp_path):
    assert parse_source("ViT-B-32/laion2b_s34b_b79k") == ("ViT-B-32", "laion2b_s34b_b79k")
    assert parse_source("ViT-B-32//abs/path/w.safetensors") == ("ViT-B-32", "/abs/path/w.safetensors")
    assert parse_source("hf-hub:org/repo") == ("hf-hub:org/repo", None)
    assert parse_source(str(tmp_path)) == (f"local-dir:{tmp_path}", None)
    with pytest.raises(ShiftbenchError, match="ARCH/PRETRAINED"):
        parse_source("ViT-B-32")
    assert preprocess_from_open_clip({"size": (24, 32), "resize_mode": "squash"}).resize == "exact"


def test_factories_report_a_missing_backend(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm now raises ImportError
    monkeypatch.setitem(sys.modules, "open_clip", None)
    from shiftbench.install import install_command

    # the install advice that fits how shiftbench is installed (a checkout here: -e ".[timm]"), shiftbench/install.py
    with pytest.raises(ShiftbenchError, match=re.escape(install_command("timm"))):
        sb.create_model("timm:resnet18")
    with pytest.raises(ShiftbenchError, match="open_clip_torch .*" + re.escape(install_command("open_clip"))):
        sb.create_model("open_clip:ViT-B-32/openai")


# A round trip through a real timm model (save_for_hf + timm:FOLDER) cannot run on this machine class:
# timm imports torchvision, and PyPI's torchvision for torch 2.13 is a CUDA build that fails to load
# beside the CPU torch. The adapter is covered above with models that match timm's interfaces.
