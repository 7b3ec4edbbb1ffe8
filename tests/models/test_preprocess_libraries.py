"""Every adapter's input tensor equals what its own library's eval transform gives for the same image.

The libraries run for real (timm, open_clip, torchvision): an image of a generated size (1 to 1,000 px a
side, portrait and landscape) and mode (grey, RGB, RGBA, palette, grey + alpha) is read as shiftbench reads a
file (``to_rgb_uint8``) and fed through the adapter's :class:`Preprocess`; the same PIL image goes through the
library's transform as its documentation loads it (``convert("RGB")``). The two float tensors agree to 1e-5
after normalisation. The one resize of the code base (shiftbench.resize) is also checked against Pillow byte
for byte, on numpy and on torch tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shiftbench.models.base import Preprocess
from shiftbench.resize import INTERPOLATIONS, pil_weights, resize, resize_tensor
from shiftbench.sample import to_rgb_uint8

torch = pytest.importorskip("torch")
PIL = pytest.importorskip("PIL.Image")
timm_data = pytest.importorskip("timm.data")
open_clip = pytest.importorskip("open_clip")
tv_models = pytest.importorskip("torchvision.models")

MODES = ("RGB", "L", "RGBA", "P", "LA")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pil_images(draw, max_side: int = 1000, max_ratio: float = 24.0):
    """A PIL image of any size within ``max_side`` (aspect up to ``max_ratio``), in one of :data:`MODES`, with
    random pixels (noise is the hardest case for resampling)."""
    h = draw(st.integers(1, max_side))
    w = draw(st.integers(1, max_side))
    assume(max(h, w) / min(h, w) <= max_ratio)
    mode = draw(st.sampled_from(MODES))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if mode == "RGB":
        return PIL.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    if mode == "L":
        return PIL.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if mode == "RGBA":
        return PIL.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    if mode == "LA":
        return PIL.fromarray(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), "LA")
    image = PIL.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L").convert("P")
    image.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
    return image


def _ours(preprocess: Preprocess, image) -> np.ndarray:
    return preprocess([to_rgb_uint8(image)])[0]


def _theirs(transform, image) -> np.ndarray:
    return transform(image.convert("RGB")).numpy()


def _assert_equal(preprocess: Preprocess, transform, image) -> None:
    ours, theirs = _ours(preprocess, image), _theirs(transform, image)
    assert ours.shape == theirs.shape, (image.size, image.mode)
    assert np.abs(ours - theirs).max() <= 1e-5, (image.size, image.mode, float(np.abs(ours - theirs).max()))


# -- the one resize, against Pillow --------------------------------------------------------------------------------
@SETTINGS
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), st.integers(1, 300),
       st.sampled_from(sorted(INTERPOLATIONS)), st.integers(0, 2 ** 32 - 1))
def test_tensor_resize_is_pillow_byte_for_byte(h, w, th, tw, interpolation, seed):
    image = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    expected = resize(image, (th, tw), interpolation)
    got = resize_tensor(torch.from_numpy(image).permute(2, 0, 1)[None], (th, tw), interpolation)
    assert np.array_equal(got[0].permute(1, 2, 0).numpy().astype(np.uint8), expected)
    assert got.dtype == torch.float32 and float(got.min()) >= 0 and float(got.max()) <= 255


def test_pillow_weights_rows_sum_to_one_in_fixed_point():
    for interpolation in INTERPOLATIONS:
        for n_in, n_out in ((1, 7), (7, 1), (224, 256), (500, 224), (3, 1000)):
            w = pil_weights(n_in, n_out, interpolation)
            assert w.shape == (n_out, n_in)
            assert np.all(np.abs(w.sum(axis=1) - (1 << 22)) <= n_in), (interpolation, n_in, n_out)


@SETTINGS
@given(pil_images(max_side=400), st.sampled_from(["bicubic", "bilinear"]), st.booleans())
def test_tensor_path_equals_numpy_path(image, interpolation, squash):
    p = Preprocess(size=(48, 40), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                   resize="exact" if squash else "shorter", crop_fraction=0.875, interpolation=interpolation)
    arr = to_rgb_uint8(image)
    got = p.tensor(torch.from_numpy(arr).permute(2, 0, 1)[None]).numpy()
    assert np.abs(got - p([arr])).max() <= 1e-5


# -- timm ---------------------------------------------------------------------------------------------------------
TIMM_CONFIGS = {
    # name -> what it exercises
    "resnet50.a1_in1k": "center, crop 0.95, bicubic",
    "resnet50.tv_in1k": "center, crop 0.875, bilinear",
    "dm_nfnet_f0.dm_in1k": "squash, crop 0.9, bicubic, 192 px",
    "vit_base_patch16_clip_224.openai_ft_in1k": "center, crop 1.0, CLIP mean/std",
    "convnext_tiny.fb_in22k_ft_in1k_384": "squash, crop 1.0, 384 px",
}


def _timm_config(name: str) -> dict:
    from timm.models import get_pretrained_cfg

    return timm_data.resolve_data_config(pretrained_cfg=get_pretrained_cfg(name).to_dict())


@pytest.mark.parametrize("name", sorted(TIMM_CONFIGS))
def test_timm_configs_are_what_the_test_says(name):
    config = _timm_config(name)
    assert (config.get("crop_mode") or "center") in TIMM_CONFIGS[name]
    assert config["interpolation"] in TIMM_CONFIGS[name] or name.startswith(("vit", "convnext"))


@pytest.mark.parametrize("name", sorted(TIMM_CONFIGS))
@SETTINGS
@given(image=pil_images())
def test_timm_adapter_pixels_equal_timm_eval_transform(name, image):
    from shiftbench.models.timm_models import preprocess_from_data_config

    config = _timm_config(name)
    _assert_equal(preprocess_from_data_config(config), timm_data.create_transform(**config, is_training=False), image)


@SETTINGS
@given(image=pil_images(max_side=600), crop_pct=st.sampled_from([0.875, 0.9, 0.95, 1.0]),
       size=st.sampled_from([(160, 224), (224, 160), (96, 96)]), interpolation=st.sampled_from(["bicubic", "bilinear"]))
def test_timm_non_square_and_any_crop_pct(image, crop_pct, size, interpolation):
    from shiftbench.models.timm_models import preprocess_from_data_config

    config = {"input_size": (3, *size), "crop_pct": crop_pct, "crop_mode": "center", "interpolation": interpolation,
              "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    _assert_equal(preprocess_from_data_config(config), timm_data.create_transform(**config, is_training=False), image)


def test_timm_border_crop_mode_is_refused_in_one_line():
    from shiftbench.errors import ShiftbenchError
    from shiftbench.models.timm_models import preprocess_from_data_config

    config = {"input_size": (3, 224, 224), "crop_pct": 1.0, "crop_mode": "border", "interpolation": "bicubic",
              "mean": (0.5,) * 3, "std": (0.5,) * 3}
    with pytest.raises(ShiftbenchError, match="crop_mode 'border'"):
        preprocess_from_data_config(config)


# -- open_clip ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("resize_mode,interpolation,size", [
    ("shortest", "bicubic", 224), ("shortest", "bilinear", 160), ("squash", "bicubic", 224), ("squash", "bilinear", 96),
])
@SETTINGS
@given(image=pil_images())
def test_open_clip_adapter_pixels_equal_open_clip_preprocess(resize_mode, interpolation, size, image):
    from shiftbench.models.open_clip_models import OPENAI_MEAN, OPENAI_STD, preprocess_from_open_clip

    cfg = {"size": size, "mean": OPENAI_MEAN, "std": OPENAI_STD, "interpolation": interpolation,
           "resize_mode": resize_mode}
    transform = open_clip.image_transform(size, is_train=False, mean=OPENAI_MEAN, std=OPENAI_STD,
                                          resize_mode=resize_mode, interpolation=interpolation)
    _assert_equal(preprocess_from_open_clip(cfg), transform, image)


def test_open_clip_model_preprocess_cfg_round_trip():
    """The preprocess_cfg a real open_clip model carries (ViT-B-32, random init) gives the transform
    ``create_model_and_transforms`` returns for it."""
    from shiftbench.models.open_clip_models import preprocess_from_open_clip

    model, _, transform = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    p = preprocess_from_open_clip(model.visual.preprocess_cfg)
    rng = np.random.default_rng(0)
    for h, w in ((300, 500), (500, 300), (17, 31), (224, 224)):
        _assert_equal(p, transform, PIL.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))


# -- torchvision --------------------------------------------------------------------------------------------------
TV_WEIGHTS = ["ResNet50_Weights.IMAGENET1K_V1", "ResNet50_Weights.IMAGENET1K_V2", "EfficientNet_B3_Weights.IMAGENET1K_V1",
              "ViT_B_16_Weights.IMAGENET1K_V1"]


def _tv_preprocess(weights) -> Preprocess:
    from shiftbench.models.torchvision_models import preprocess_from_weights

    return preprocess_from_weights(weights)


@pytest.mark.parametrize("weights_name", TV_WEIGHTS)
@SETTINGS
@given(image=pil_images())
def test_torchvision_adapter_pixels_equal_weights_transforms(weights_name, image):
    enum_name, member = weights_name.split(".")
    weights = getattr(getattr(tv_models, enum_name), member)
    _assert_equal(_tv_preprocess(weights), weights.transforms(), image)


class _Identity:
    """A TorchClassifier whose network is the identity: ``forward_images`` returns the normalised input it built."""

    @staticmethod
    def make(preprocess: Preprocess):
        from shiftbench.models.base import TorchClassifier

        class Identity(TorchClassifier):
            name = "identity"

            def __init__(self):
                self.preprocess = preprocess
                self._setup(torch.nn.Identity())

        return Identity()


@SETTINGS
@given(image=pil_images(max_side=300), interpolation=st.sampled_from(["bicubic", "bilinear", "lanczos"]),
       squash=st.booleans())
def test_differentiable_path_is_the_numpy_path_before_rounding(image, interpolation, squash):
    """``forward_images`` (attacks, Grad-CAM) resizes with the same Pillow weights in the same pass order, clipped
    but unrounded: within 1.5 grey levels of the model's input (each of two passes rounds by at most half a level,
    the second spreads the first's error by its weights' absolute sum), and gradients flow."""
    std = (0.229, 0.224, 0.225)
    p = Preprocess(size=(40, 32), mean=(0.485, 0.456, 0.406), std=std, resize="exact" if squash else "shorter",
                   crop_fraction=0.9, interpolation=interpolation)
    model = _Identity.make(p)
    arr = to_rgb_uint8(image)
    x01 = (torch.from_numpy(arr).permute(2, 0, 1)[None].float() / 255.0).requires_grad_(True)
    got = model.forward_images(x01)
    assert got.shape == (1, 3, 40, 32)
    bound = 1.5 / 255 / min(std) + 1e-5
    assert float((got.detach() - torch.from_numpy(p([arr]))).abs().max()) <= bound
    got.sum().backward()
    assert x01.grad is not None and torch.isfinite(x01.grad).all()
