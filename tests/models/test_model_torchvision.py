"""The ``torchvision:`` adapter against torchvision itself: real architectures at random init under a fixed seed,
weights written to a local file (or to torch hub's cache, where torchvision keeps its own), loaded through the
adapter, and compared with the module torchvision builds and loads on the same input tensor."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError

import tiny_hub

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from shiftbench.models.torchvision_models import STANDARD_RECIPE, hub_cache_file, parse_source  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (300, 240, 3), dtype=np.uint8), rng.integers(0, 256, (200, 260, 3), dtype=np.uint8)]


def _reference_logits(module, model, images) -> np.ndarray:
    """The library's module on the adapter's own input tensor."""
    with torch.no_grad():
        return module.eval()(model.preprocess_tensor(images)).numpy()


def _no_download(monkeypatch):
    """Any download attempt fails the test (torch hub's downloader, as torchvision calls it)."""
    def refuse(url, *args, **kwargs):
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_local_file_gives_torchvisions_own_logits(tmp_path, suffix):
    path = tiny_hub.save_tiny_torchvision(tmp_path / f"r18{suffix}", seed=0)
    model = sb.create_model(f"torchvision:resnet18/{path}")  # ARCH//abs/path, as open_clip: writes it
    torch.manual_seed(0)
    same_seed = torchvision.models.resnet18()  # built by torchvision with the seed the file was written under
    images = _images()
    logits = model.predict_logits(images)
    assert logits.shape == (2, 1000) and logits.dtype == np.float32
    assert np.ptp(logits, axis=1).min() > 0 and not np.allclose(logits[0], logits[1])  # a comparison that can fail
    np.testing.assert_allclose(logits, _reference_logits(same_seed, model, images), atol=1e-5)
    assert model.name == f"torchvision:resnet18/{path}" and model.weight_files() == [str(path)]
    # torchvision's classifiers are ImageNet-1k models: a 1000-class head of one is ImageNet-1k whatever file fills it
    assert model.label_space.name == "imagenet1k"
    p = model.preprocess  # torchvision's ImageNet eval recipe: Resize(256), CenterCrop(224), bilinear
    assert (p.size, p.resize_size, p.resize, p.interpolation) == ((224, 224), 256, "shorter", "bilinear")
    assert (p.mean, p.std, p.value_range) == (STANDARD_RECIPE["mean"], STANDARD_RECIPE["std"], 1.0)
    # the weights= keyword is the same file
    keyword = sb.create_model("torchvision:resnet18", weights=path)
    assert keyword.weight_files() == [str(path)]
    for key, value in keyword.module.state_dict().items():
        assert torch.equal(value, model.module.state_dict()[key]), key


def test_named_weights_come_from_torch_hubs_cache_only(tmp_path, monkeypatch):
    """``ARCH/NAME`` reads torchvision's own weights from torch hub's cache (never downloading), with the weights'
    own transforms(); the adapter's logits equal torchvision's builder loading the same cached file."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    _no_download(monkeypatch)
    weights = torchvision.models.MobileNet_V2_Weights
    cached = hub_cache_file(weights.IMAGENET1K_V2)
    assert cached.parent == tmp_path / "torch" / "hub" / "checkpoints" and cached.name in weights.IMAGENET1K_V2.url

    with pytest.raises(ShiftbenchError) as err:
        sb.create_model("torchvision:mobilenet_v2/IMAGENET1K_V2")
    msg = str(err.value)
    assert "\n" not in msg and str(cached) in msg and weights.IMAGENET1K_V2.url in msg and "never downloads" in msg
    assert not cached.exists()

    tiny_hub.save_tiny_torchvision(cached, seed=3, arch="mobilenet_v2")  # as if torchvision had downloaded it
    model = sb.create_model("torchvision:mobilenet_v2/IMAGENET1K_V2")
    own = torchvision.models.get_model("mobilenet_v2", weights=weights.IMAGENET1K_V2)  # torchvision's own loader
    images = _images(1)
    np.testing.assert_allclose(model.predict_logits(images), _reference_logits(own, model, images), atol=1e-5)
    assert model.weight_files() == [str(cached)] and model.label_space.name == "imagenet1k"
    t = weights.IMAGENET1K_V2.transforms()  # ImageClassification(crop 224, resize 232, bilinear)
    p = model.preprocess
    assert (p.size, p.resize_size, p.interpolation) == ((t.crop_size[0],) * 2, t.resize_size[0], t.interpolation.value)
    assert (p.mean, p.std) == (tuple(t.mean), tuple(t.std)) and p.resize_size == 232
    # the architecture alone is its DEFAULT weights (V2 here)
    default = sb.create_model("torchvision:mobilenet_v2")
    np.testing.assert_array_equal(default.predict_logits(images), model.predict_logits(images))
    # V1 is another file, not in the cache
    with pytest.raises(ShiftbenchError, match=re.escape(hub_cache_file(weights.IMAGENET1K_V1).name)):
        sb.create_model("torchvision:mobilenet_v2/IMAGENET1K_V1")


def test_a_local_copy_of_named_weights_takes_their_recipe(tmp_path):
    path = tiny_hub.save_tiny_torchvision(tmp_path / "mnv2.pth", arch="mobilenet_v2")
    v1 = sb.create_model("torchvision:mobilenet_v2/IMAGENET1K_V1", weights=path)
    v2 = sb.create_model("torchvision:mobilenet_v2/IMAGENET1K_V2", weights=path)
    assert (v1.preprocess.resize_size, v2.preprocess.resize_size) == (256, 232)
    assert v1.weight_files() == v2.weight_files() == [str(path)]
    images = _images(2)
    np.testing.assert_array_equal(v1.forward(v1.preprocess_tensor(images)), v2.forward(v1.preprocess_tensor(images)))


def test_a_cached_file_with_code_in_it_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    _no_download(monkeypatch)
    marker = tmp_path / "ran"
    cached = hub_cache_file(torchvision.models.ResNet18_Weights.IMAGENET1K_V1)
    cached.parent.mkdir(parents=True)
    torch.save({"fc.weight": _Payload(str(marker))}, cached)
    local = tmp_path / "local.pth"
    torch.save({"fc.weight": _Payload(str(marker))}, local)
    for name, kw in (("torchvision:resnet18/IMAGENET1K_V1", {}), ("torchvision:resnet18", {"weights": local})):
        with pytest.raises(ShiftbenchError) as err:
            sb.create_model(name, **kw)
        assert "\n" not in str(err.value) and "weights_only=True" in str(err.value)
    assert not marker.exists()


class _Payload:
    """Unpickling this runs code (it would create ``path``): what a weights-only load must refuse."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_heads_and_label_spaces(tmp_path):
    path = tiny_hub.save_tiny_torchvision(tmp_path / "r18_10.pth", num_classes=10)
    numbered = sb.create_model("torchvision:resnet18", weights=path, num_classes=10)
    assert numbered.label_space.num_classes == 10 and numbered.label_space.name != "imagenet1k"  # a count says nothing
    named = sb.create_model("torchvision:resnet18", weights=path, num_classes=10,
                            class_names=[f"c{i}" for i in range(10)])
    assert named.label_space.class_names[3] == "c3"
    np.testing.assert_array_equal(named.predict_logits(_images()), numbered.predict_logits(_images()))
    random = sb.create_model("torchvision:resnet18", pretrained=False)
    assert random.weight_files() == [] and random.label_space.name == "imagenet1k"
    small = sb.create_model("torchvision:resnet18", pretrained=False, crop_size=64, resize_size=72,
                            interpolation="bicubic")
    p = small.preprocess
    assert (p.size, p.resize_size, p.interpolation) == ((64, 64), 72, "bicubic")
    assert small.preprocess_tensor(_images()).shape == (2, 3, 64, 64)


def test_parse_source():
    assert parse_source("resnet50/IMAGENET1K_V2") == ("resnet50", "IMAGENET1K_V2", None)
    assert parse_source("resnet50//abs/w.safetensors") == ("resnet50", None, "/abs/w.safetensors")
    assert parse_source("resnet50/rel/w.pth") == ("resnet50", None, "rel/w.pth")
    assert parse_source("resnet50/w.pth") == ("resnet50", None, "w.pth")
    assert parse_source("vit_b_16") == ("vit_b_16", None, None)


def test_user_mistakes_are_one_line(tmp_path):
    r18 = tiny_hub.save_tiny_torchvision(tmp_path / "r18.pth")
    r18_10 = tiny_hub.save_tiny_torchvision(tmp_path / "r18_10.safetensors", num_classes=10)
    (tmp_path / "list.pth").write_bytes(b"")
    torch.save([1, 2], tmp_path / "plain.pth")
    cases = [
        ("torchvision:resnet5", {}, "did you mean 'resnet50'"),
        ("torchvision:fasterrcnn_resnet50_fpn", {}, "is a detection model"),
        ("torchvision:deeplabv3_resnet50", {}, "is a segmentation model"),
        ("torchvision:resnet18/IMAGENET1K_V3", {}, "unknown weights 'IMAGENET1K_V3'; did you mean 'IMAGENET1K_V1'"),
        ("torchvision:vgg16/IMAGENET1K_FEATURES", {}, "no classifier head"),
        (f"torchvision:resnet18/{tmp_path}/missing.pth", {}, "not found"),
        (f"torchvision:resnet34/{r18}", {}, "does not fit resnet34: .*missing"),
        (f"torchvision:resnet18/{r18_10}", {}, r"does not fit resnet18: 2 of another shape \(fc.weight: \[10, 512\].*"
                                               r"pass num_classes=10"),
        (f"torchvision:resnet18/{tmp_path}/list.pth", {}, "cannot read"),
        (f"torchvision:resnet18/{tmp_path}/plain.pth", {}, "no state dict of tensors"),
        (f"torchvision:resnet18/{r18}", {"weights": r18}, "weights given twice"),
        ("torchvision:resnet18", {"weights": r18, "pretrained": False}, "pretrained=False"),
        ("torchvision:resnet18", {"pretrained": False, "interpolation": "cubic"}, "interpolation 'cubic'"),
        ("torchvision:resnet18", {"pretrained": False, "depth": 7}, "cannot build resnet18 with {'depth': 7}"),
        ("torchvision:resnet18", {"weights": r18_10, "num_classes": 10, "class_names": ["a"]}, "1 class_names"),
    ]
    for name, kw, pattern in cases:
        with pytest.raises(ShiftbenchError) as err:
            sb.create_model(name, **kw)
        assert "\n" not in str(err.value) and re.search(pattern, str(err.value)), (name, str(err.value))


def test_a_missing_torchvision_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    from shiftbench.install import install_command

    with pytest.raises(ShiftbenchError, match=re.escape(install_command("torchvision"))):
        sb.create_model("torchvision:resnet18")
