"""timm and open_clip adapters against the real libraries: models built from their real configs at random init
under a fixed seed, written to a local folder or file (tests/tiny_hub.py), loaded through the adapter's local path
(the code a user with downloaded weights runs) and compared with the library's own module and loader on the same
input tensor; label spaces, the files a run's identity hashes, one-line errors, the error without the library."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
import tiny_hub
from shiftbench.models.open_clip_models import parse_source, preprocess_from_open_clip
from shiftbench.models.timm_models import label_space_from_config, preprocess_from_data_config

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
open_clip = pytest.importorskip("open_clip")
F = torch.nn.functional


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


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (90, 70, 3), dtype=np.uint8), rng.integers(0, 256, (40, 64, 3), dtype=np.uint8)]


def test_timm_local_folder_gives_timms_own_logits(tmp_path, one_thread):
    folder = tiny_hub.save_tiny_timm(tmp_path / "timm", seed=0)
    model = sb.create_model(f"timm:{folder}")
    own = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()  # timm's own loader, same folder
    torch.manual_seed(0)
    same_seed = timm.create_model(tiny_hub.TIMM_ARCH, pretrained=False).eval()  # built directly with the seed
    images = _images()
    logits = model.predict_logits(images)
    x = model.preprocess_tensor(images)
    with torch.no_grad():
        np.testing.assert_allclose(logits, own(x).numpy(), atol=1e-5)
        np.testing.assert_allclose(logits, same_seed(x).numpy(), atol=1e-5)
    assert logits.shape == (2, 1000) and model.name == f"timm:{folder}"
    assert np.ptp(logits, axis=1).min() > 0 and not np.allclose(logits[0], logits[1])  # a comparison that can fail
    assert model.label_space.name == "imagenet1k"  # the saved pretrained config's tag: r160_in1k
    assert model.weight_files() == [str(folder / "model.safetensors")]
    # the declared preprocessing is the saved data config's (timm's resolve_model_data_config)
    cfg = timm.data.resolve_model_data_config(own)
    p = model.preprocess
    assert p.size == tuple(cfg["input_size"][1:]) and p.crop_fraction == cfg["crop_pct"]
    assert (p.interpolation, p.mean, p.std) == (cfg["interpolation"], tuple(cfg["mean"]), tuple(cfg["std"]))
    assert sb.create_model(f"timm:{folder}", pretrained=False).weight_files() == []  # random init: no file


def test_timm_heads_decide_the_label_space_by_names_not_counts(tmp_path, one_thread):
    named = tiny_hub.save_tiny_timm(tmp_path / "named", num_classes=3, label_names=["cat", "dog", "car"])
    model = sb.create_model(f"timm:{named}")
    assert model.label_space.class_names == ("cat", "dog", "car") and model.predict_logits(_images()).shape == (2, 3)
    unnamed = tiny_hub.save_tiny_timm(tmp_path / "unnamed", num_classes=5)
    assert sb.create_model(f"timm:{unnamed}").label_space.name == f"timm:{unnamed}"  # numbered: a label_map ties it
    with pytest.raises(ShiftbenchError, match="no classification head"):
        sb.create_model(f"timm:{tiny_hub.TIMM_ARCH}", pretrained=False, num_classes=0)


def test_timm_user_mistakes_are_one_line(tmp_path):
    folder = tiny_hub.save_tiny_timm(tmp_path / "timm")
    tiny_hub.save_tiny_torchvision(folder / "model.safetensors", arch="squeezenet1_1")  # another network's weights
    (tmp_path / "empty").mkdir()
    cases = [("timm:resnt18", {}, r"Unknown model \(resnt18\)"),
             (f"timm:{tmp_path / 'empty'}", {}, "config.json"),
             (f"timm:{folder}", {}, "Missing key")]
    for name, kw, pattern in cases:
        with pytest.raises(ShiftbenchError) as err:
            sb.create_model(name, **kw)
        assert "\n" not in str(err.value) and re.search(pattern, str(err.value)), str(err.value)


def _open_clip_reference(module, tokenizer, model, images, classes, templates) -> np.ndarray:
    """open_clip's zero-shot recipe on the adapter's input tensor: normalised image features against the normalised
    mean of each class's normalised template features, times the logit scale."""
    with torch.no_grad():
        image = F.normalize(module.encode_image(model.preprocess_tensor(images)), dim=-1)
        rows = []
        for c in classes:
            text = F.normalize(module.encode_text(tokenizer([t.format(c) for t in templates])), dim=-1).mean(dim=0)
            rows.append(text / text.norm())
        return (module.logit_scale.exp() * image @ torch.stack(rows).T).numpy()


CLASSES, TEMPLATES = ["cat", "dog", "car"], ["a photo of a {}.", "a {}."]


def test_open_clip_architecture_and_file_gives_open_clips_own_logits(tmp_path, one_thread):
    arch, weights = tiny_hub.save_tiny_open_clip(tmp_path / "clip", seed=0)
    model = sb.create_model(f"open_clip:{arch}/{weights}", classes=CLASSES, templates=TEMPLATES)  # ARCH//abs/path
    own = open_clip.create_model(arch, pretrained=str(weights)).eval()  # open_clip's own loader, same file
    torch.manual_seed(0)
    same_seed = open_clip.create_model(arch).eval()  # built directly with the seed the file was written under
    for key, value in same_seed.state_dict().items():
        assert torch.equal(value, own.state_dict()[key]), key
    images = _images()
    logits = model.predict_logits(images)
    expected = _open_clip_reference(own, open_clip.get_tokenizer(arch), model, images, CLASSES, TEMPLATES)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert np.ptp(logits, axis=1).min() > 0.01 and not np.allclose(logits[0], logits[1])
    assert model.logit_scale == pytest.approx(float(own.logit_scale.detach().exp()))
    assert model.label_space.class_names == tuple(CLASSES)
    assert model.weight_files() == [str(weights)]
    assert model.preprocess.size == (32, 32) and model.preprocess.crop_fraction == 1.0  # visual.preprocess_cfg
    # without classes: ImageNet-1k with CLIP's 80 templates (class features are built on first use only)
    default = sb.create_model(f"open_clip:{arch}/{weights}")
    assert default.label_space.name == "imagenet1k" and len(default.templates) == 80


def test_open_clip_local_folder_gives_open_clips_own_logits(tmp_path, one_thread):
    _, weights = tiny_hub.save_tiny_open_clip(tmp_path / "clip", seed=1)
    folder = weights.parent
    model = sb.create_model(f"open_clip:{folder}", classes=CLASSES, templates=TEMPLATES)
    own = open_clip.create_model(f"local-dir:{folder}").eval()
    tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
    images = _images(1)
    np.testing.assert_allclose(model.predict_logits(images),
                               _open_clip_reference(own, tokenizer, model, images, CLASSES, TEMPLATES), atol=1e-5)
    assert model.weight_files() == [str(weights)]
    p = model.preprocess  # the folder's open_clip_config.json preprocess_cfg
    assert (p.mean, p.interpolation) == ((0.5, 0.5, 0.5), tiny_hub.OPEN_CLIP_PREPROCESS["interpolation"])


def test_open_clip_user_mistakes_are_one_line(tmp_path):
    arch, weights = tiny_hub.save_tiny_open_clip(tmp_path / "clip")
    other = tiny_hub.save_tiny_torchvision(tmp_path / "r18.safetensors", arch="squeezenet1_1")
    cases = [(f"open_clip:{arch}/{tmp_path}/missing.safetensors", "not a known tag or valid file path"),
             (f"open_clip:{arch}/{other}", "Missing key"),
             ("open_clip:ViT-Q-99/x", "not found"),
             (f"open_clip:{tmp_path}", "open_clip_config.json")]
    for name, pattern in cases:
        with pytest.raises(ShiftbenchError) as err:
            sb.create_model(name)
        assert "\n" not in str(err.value) and pattern in str(err.value), str(err.value)


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
