"""Attribute shifts (classic backend) and attribute text: outside-mask pixels kept, layout kept, bad input refused."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.conditioning.attribute_text import (
    ATTRIBUTES, decompose_caption, edit_prompt, insert_attribute, object_words, rewrite_caption,
)
from shiftbench.errors import ShiftbenchError
from shiftbench.registry import SHIFTS
from shiftbench.sample import Sample
from shiftbench.shifts.attributes import edit_attribute, strength_of, variation_degree
from shiftbench.shifts.attributes.classic import oklab_to_srgb, srgb_to_oklab

from conftest import make_sample

LOCAL = [(f, v) for f in ("color", "material", "pattern") for v in ATTRIBUTES[f]]
STYLES = list(ATTRIBUTES["style"])


@pytest.fixture(scope="module")
def objects_samples():
    ds = sb.load_dataset("objects")
    return [ds.load(i) for i in (0, 37, 120)]


def test_registered_in_attribute_group_with_values_as_parameters():
    for family in ATTRIBUTES:
        entry = SHIFTS.entry(f"attribute_{family}")
        assert entry.meta["group"] == "attribute"
        for value in ATTRIBUTES[family]:
            shift = sb.create_shift(f"attribute_{family}", **{family: value})
            assert shift.config[family] == value and shift.config["backend"] == "classic"


@pytest.mark.parametrize("family,value", LOCAL)
def test_local_edit_changes_no_pixel_outside_the_mask(family, value, objects_samples):
    shift = sb.create_shift(f"attribute_{family}", **{family: value})
    assert shift.kind == "sample" and shift.requires == {"mask"}
    for s in objects_samples:
        out = shift(s, severity=5, seed=1)
        m = s.mask > 0
        assert np.array_equal(out.image[~m], s.image[~m])
        changed = np.abs(out.image[m].astype(int) - s.image[m].astype(int)).sum(axis=1) > 6
        # the edit is visible inside; dotted inks discs of radius 0.28 periods, pi * 0.28^2 = 25% of the area
        assert changed.mean() > (0.2 if value == "dotted" else 0.3), (family, value, changed.mean())
        assert np.array_equal(out.mask, s.mask) and out.label == s.label


@pytest.mark.parametrize("family,value", LOCAL)
def test_severity_scales_the_edit(family, value, objects_samples):
    s = objects_samples[1]
    shift = sb.create_shift(f"attribute_{family}", **{family: value})
    m = s.mask > 0
    dist = [np.abs(shift(s, severity=k, seed=0).image[m].astype(float) - s.image[m]).mean() for k in (1, 3, 5)]
    assert dist[0] < dist[1] < dist[2]


def test_recolour_keeps_shading_and_reaches_the_hue(objects_samples):
    s = objects_samples[2]
    m = s.mask > 0
    out = sb.create_shift("attribute_color", color="violet")(s, severity=5, seed=0)
    lab_in, lab_out = srgb_to_oklab(s.image)[m], srgb_to_oklab(out.image)[m]
    # lightness keeps its per-pixel variation (shading), hue moves to violet's
    assert np.corrcoef(lab_in[:, 0], lab_out[:, 0])[0, 1] > 0.9
    target = srgb_to_oklab(np.array([[[138, 43, 226]]], np.uint8))[0, 0]
    hue = np.arctan2(lab_out[:, 2], lab_out[:, 1])
    assert np.abs(np.angle(np.exp(1j * (hue - np.arctan2(target[2], target[1]))))).mean() < 0.15


def test_oklab_round_trip():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    assert np.abs(oklab_to_srgb(srgb_to_oklab(img)).astype(int) - img).max() <= 1


def _edges(img: np.ndarray) -> np.ndarray:
    import cv2

    g = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32)
    g = cv2.GaussianBlur(g, (0, 0), 1.0)
    return np.hypot(cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1))


@pytest.mark.parametrize("style", STYLES)
def test_global_style_keeps_the_layout(style, objects_samples):
    shift = sb.create_shift("attribute_style", style=style)
    assert shift.kind == "image" and not shift.requires
    for s in objects_samples:
        out = shift(s, severity=5, seed=0)
        assert np.abs(out.image.astype(int) - s.image).mean() > 8  # a visible change everywhere
        e_in, e_out = _edges(s.image), _edges(out.image)
        aligned = np.corrcoef(e_in.ravel(), e_out.ravel())[0, 1]
        moved = max(np.corrcoef(np.roll(e_in, d, axis=a).ravel(), e_out.ravel())[0, 1]
                    for d in (-6, 6) for a in (0, 1))
        # edges of the styled image sit where the input's are, not a few pixels away
        assert aligned > 0.3 and aligned > moved + 0.1, (style, aligned, moved)
        assert out.caption != s.caption and np.array_equal(out.mask, s.mask)


def test_style_works_on_a_bare_image_without_mask():
    img = make_sample().image
    out = sb.create_shift("attribute_style", style="sketch")(img, severity=3, seed=0)
    assert out.shape == img.shape and out.dtype == np.uint8


def test_bad_input_is_refused_clearly(sample):
    with pytest.raises(ShiftbenchError, match="'orange' is not in the attribute set.*violet, pink, multi-color"):
        sb.create_shift("attribute_color", color="orange")
    with pytest.raises(ShiftbenchError, match="not in the attribute set"):
        sb.create_shift("attribute_material", material="glass")
    with pytest.raises(ShiftbenchError, match="style edits are global"):
        sb.create_shift("attribute_style", style="sketch", region="mask")
    with pytest.raises(ShiftbenchError, match="style edits are global"):
        edit_attribute(sample.image, "style", "sketch", mask=sample.mask)
    empty = sample.replace(mask=np.zeros_like(sample.mask))
    with pytest.raises(ShiftbenchError, match="mask is empty"):
        sb.create_shift("attribute_color")(empty, severity=3)
    with pytest.raises(ShiftbenchError, match="needs samples with a mask"):
        sb.create_shift("attribute_pattern")(Sample(image=sample.image), severity=3)
    with pytest.raises(ShiftbenchError, match="unknown backend"):
        sb.create_shift("attribute_color", backend="gan")
    with pytest.raises(ShiftbenchError, match="needs model="):
        sb.create_shift("attribute_color", backend="diffusion")
    with pytest.raises(ShiftbenchError, match="unknown parameter 'strength'; accepted parameters: color, backend"):
        sb.create_shift("attribute_color", strength=2)
    with pytest.raises(ShiftbenchError, match="unknown attribute family"):
        edit_attribute(sample.image, "shape", "round", mask=sample.mask)


def test_functional_edit_equals_the_shift(sample):
    a = edit_attribute(sample.image, "pattern", "striped", sample.mask, severity=4, seed=3, sample_id="x")
    b = sb.create_shift("attribute_pattern", pattern="striped")(sample.replace(id="x"), severity=4, seed=3).image
    assert np.array_equal(a, b)
    full = np.ones(sample.mask.shape, bool)
    assert edit_attribute(sample.image, "style", "snowy", full).shape == sample.image.shape


def test_user_texture_photo(tmp_path, sample):
    from PIL import Image

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "t.png")
    shift = sb.create_shift("attribute_material", material="metal", texture=str(tmp_path / "t.png"))
    out = shift(sample, severity=5, seed=0)
    assert np.array_equal(out.image[~sample.mask], sample.image[~sample.mask])
    with pytest.raises(ShiftbenchError, match="file not found"):
        sb.create_shift("attribute_material", material="metal", texture=str(tmp_path / "none.png"))


def test_severity_maps_to_strength_and_variation_degree():
    assert [strength_of(s) for s in (1, 3, 5)] == [0.2, 0.6, 1.0]
    assert [variation_degree(s) for s in (1, 3, 5)] == [1.0, 2.0, 3.0]


# -- text -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caption,value,expected", [
    ("a horse on the grass", "violet", "a violet horse on the grass"),
    ("A photo of a brown horse running on the grass", "pink", "A photo of a pink horse running on the grass"),
    ("an elephant standing in a field", "wood", "a wooden elephant standing in a field"),
    ("a dog", "striped", "a striped dog"),
    ("a cat on a sofa.", "multi-color", "a multi-colored cat on a sofa"),
    ("two teddy bears sitting on a bed", "metal", "two metal teddy bears sitting on a bed"),
    ("a violet horse", "violet", "a violet horse"),
    ("an image showing an owl on a branch", "paper", "an image showing a paper owl on a branch"),
])
def test_insert_attribute(caption, value, expected):
    assert insert_attribute(caption, value) == expected


def test_decompose_caption_parts_and_round_trip():
    c = decompose_caption("a photo of a small brown dog is running in the park")
    assert (c.domain, c.article, c.adjectives, c.subject, c.action, c.background) == (
        "a photo of", "a", ["small", "brown"], "dog", "is running", "in the park")
    assert c.join() == "a photo of a small brown dog is running in the park"
    pinned = decompose_caption("a teddy bear on a bed", subject="teddy bear")
    assert pinned.subject == "teddy bear" and pinned.adjectives == [] and pinned.background == "on a bed"
    with pytest.raises(ShiftbenchError, match="non-empty"):
        decompose_caption("  ")


def test_edit_prompts_and_object_words():
    assert edit_prompt("a photo of a horse on the grass", "style", "sketch") == "a pencil sketch of a horse on the grass"
    assert edit_prompt("a horse", "style", "snowy").startswith("a horse in the snow")
    assert object_words("a horse on the grass", "color", "violet") == ["violet", "horse"]
    assert object_words("a teddy bear on a bed", "style", "sketch", subject="teddy bear") == ["teddy", "bear"]


def test_rewriter_hook_is_seeded_and_checked():
    seen = []

    def rewriter(prompt, seed):
        seen.append(seed)
        return prompt.replace("a violet", "one violet")

    a = rewrite_caption("a horse on the grass", "color", "violet", rewriter, seed=4)
    b = rewrite_caption("a horse on the grass", "color", "violet", rewriter, seed=4)
    c = rewrite_caption("a horse on the grass", "color", "violet", rewriter, seed=5)
    assert a == b == c == "one violet horse on the grass" and seen[0] == seen[1] != seen[2]
    with pytest.raises(ShiftbenchError, match="dropped the attribute"):
        rewrite_caption("a horse", "color", "violet", lambda p, s: "a horse")


def test_largest_object_curation():
    from shiftbench.conditioning.attribute_masks import largest_object

    inst = np.zeros((20, 20), np.int64)
    inst[:4, :4] = 1      # 16 px
    inst[10:, 10:] = 2    # 100 px = 25 %
    inst[0, 19] = 255     # void
    assert np.array_equal(largest_object(inst), inst == 2)
    assert largest_object(inst, min_fraction=0.3) is None
    blobs = np.zeros((20, 20), bool)
    blobs[:3, :3] = True
    blobs[8:16, 8:16] = True
    assert largest_object(blobs).sum() == 64 and largest_object(blobs)[10, 10]
    assert largest_object(np.zeros((5, 5), bool)) is None
    with pytest.raises(ShiftbenchError, match="bool or integer"):
        largest_object(np.zeros((5, 5), np.float32))
