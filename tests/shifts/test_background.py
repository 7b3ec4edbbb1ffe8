"""Background shifts (compose backend): the object kept byte for byte, backgrounds as documented, bad masks refused."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.conditioning.masks import dilate
from shiftbench.errors import ShiftbenchError
from shiftbench.registry import SHIFTS

from conftest import make_sample

COMPOSE = [("background_color", {"color": c}) for c in ("red", "green", "blue", "colorful")] + \
          [("background_texture", {"texture": t}) for t in (1, 2, 3, 4)] + \
          [("background_scene", {}), ("background_scene", {"scene": "meadow"}),
           ("background_scene", {"scene": "mixed_same"}), ("background_scene", {"scene": "mixed_rand"}),
           ("object_only", {})]


@pytest.fixture(scope="module")
def obj():
    return sb.load_dataset("objects").load(5)


def test_all_eight_background_shifts_are_registered_in_their_group():
    names = set(sb.list_shifts("*background*")) | set(sb.list_shifts("*adversarial*")) | set(sb.list_shifts("object_only"))
    assert {"background_color", "background_texture", "background_scene", "object_only", "background_only",
            "background_inpaint", "adversarial_texture", "adversarial_diffusion"} <= names
    for name in names:
        assert SHIFTS.entry(name).meta.get("group") == "background"



def test_listing_background_shifts_imports_neither_torch_nor_diffusers():
    import subprocess
    import sys

    code = ("import sys, shiftbench as sb; sb.list_shifts('*'); sb.create_shift('background_color'); "
            "print(sorted(m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name,params", COMPOSE)
def test_object_pixels_are_byte_identical_inside_the_mask(obj, name, params):
    shift = sb.create_shift(name, **params)
    for severity in (1, 5):
        out = shift(obj, severity=severity, seed=3)
        assert np.array_equal(out.image[obj.mask], obj.image[obj.mask])
        assert out.label == obj.label and np.array_equal(out.mask, obj.mask)
        outside = ~dilate(obj.mask, shift.dilation)
        changed = np.abs(out.image.astype(int) - obj.image.astype(int)).sum(-1) > 0
        assert changed[outside].mean() > 0.9  # the background did change
    assert "caption" not in shift.keeps and "layout" not in shift.keeps


def test_severity_is_the_weight_of_the_new_background(obj):
    shift = sb.create_shift("background_color", color="blue")
    outside = ~dilate(obj.mask, 6)
    full = shift(obj, severity=5, seed=0).image[outside].astype(float)
    orig = obj.image[outside].astype(float)
    for severity, weight in zip(range(1, 5), (0.2, 0.4, 0.6, 0.8)):
        part = shift(obj, severity=severity, seed=0).image[outside].astype(float)
        assert np.allclose(part, orig + weight * (full - orig), atol=1.0)


def test_the_seam_is_feathered_inside_the_dilation_band(obj):
    # an estimated mask keeps the band (an exact one gets none: test_background_exact_masks.py)
    estimated = obj.replace(meta={**obj.meta, "mask_exact": False})
    out = sb.create_shift("object_only", dilation=6)(estimated, severity=5, seed=0)
    band = dilate(obj.mask, 6) & ~obj.mask
    ratio = out.image[band].astype(float).sum(-1) / np.maximum(obj.image[band].astype(float).sum(-1), 1)
    assert 0.05 < np.median(ratio) < 0.95  # partly kept: between the object and black
    assert (out.image[~dilate(obj.mask, 6)] == 0).all()
    black = sb.create_shift("object_only")(obj, severity=5, seed=0)  # default: no band, the background is gone
    assert (black.image[~obj.mask] == 0).all() and np.array_equal(black.image[obj.mask], obj.image[obj.mask])


def test_colour_fields_are_vivid_lit_and_not_flat(obj):
    outside = ~dilate(obj.mask, 6)
    for channel, color in enumerate(("red", "green", "blue")):
        bg = sb.create_shift("background_color", color=color)(obj, seed=1).image[outside].astype(float)
        assert np.argmax(bg.mean(0)) == channel
        assert bg[:, channel].std() > 5  # lighting varies
    colorful = sb.create_shift("background_color", color="colorful")(obj, seed=1).image[outside].astype(float)
    hues = np.argmax(colorful, axis=1)
    assert len(np.unique(hues)) == 3


def test_texture_families_and_scenes_differ(obj):
    outs = [sb.create_shift("background_texture", texture=t)(obj, seed=2).image for t in (1, 2, 3, 4)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(outs[i], outs[j])
    own = obj.meta["scene_id"]
    drawn = {sb.create_shift("background_scene").draw(obj, seed=k)["scene"] for k in range(30)}
    assert own not in drawn and len(drawn) > 5
    with pytest.raises(ShiftbenchError, match="did you mean"):
        sb.create_shift("background_scene", scene="medow")


def test_mixed_same_and_mixed_rand_draw_from_the_object_contexts():
    """Mixed-Same: another scene sharing a context with the object, never its own; Mixed-Rand: scenes sharing
    none. Every object of `objects` has both, and over seeds the draws cover the pools exactly."""
    from shiftbench.datasets import objects

    ds = sb.load_dataset("objects", scenes_per_object=1)
    same, rand = sb.create_shift("background_scene", scene="mixed_same"), sb.create_shift("background_scene", scene="mixed_rand")
    for i in range(0, len(ds), 9):
        s = ds.load(i)
        oid, own = s.meta["object_id"], s.meta["scene_id"]
        contexts = set(objects.object_info(oid).contexts)
        pool_same = {x for x in objects.congruent_scenes(oid) if x != own}
        pool_rand = set(objects.incongruent_scenes(oid))
        assert pool_same and pool_rand and own in objects.congruent_scenes(oid)
        drawn_same = {same.draw(s, seed=k)["scene"] for k in range(40)}
        drawn_rand = {rand.draw(s, seed=k)["scene"] for k in range(40)}
        assert drawn_same <= pool_same and drawn_rand <= pool_rand
        assert len(drawn_same) >= min(2, len(pool_same)) and len(drawn_rand) >= 2
        assert all(contexts & set(objects.scene_info(x).contexts) for x in drawn_same)
        assert not any(contexts & set(objects.scene_info(x).contexts) for x in drawn_rand)
    # the drawn scene is in the params, and replaying them gives the same bytes
    s = ds.load(3)
    out, params = same(s, seed=7, return_params=True)
    assert np.array_equal(sb.create_shift("background_scene", scene=params["scene"])(s, seed=0).image, out.image)
    assert np.array_equal(same.replay(s, params).image, out.image)
    # contexts given in the meta (a user's own data) instead of an objects id
    mine = s.replace(meta={"contexts": ["water"]})
    assert all("water" in objects.scene_info(same.draw(mine, seed=k)["scene"]).contexts for k in range(10))
    assert not any("water" in objects.scene_info(rand.draw(mine, seed=k)["scene"]).contexts for k in range(10))


def test_mixed_scenes_need_the_object_contexts():
    s = make_sample(sid="plain")
    for scene in ("mixed_same", "mixed_rand"):
        with pytest.raises(ShiftbenchError, match=f"scene='{scene}', sample 'plain': needs the object's contexts"):
            sb.create_shift("background_scene", scene=scene)(s)
    with pytest.raises(ShiftbenchError, match="unknown context.*'lava'"):
        sb.create_shift("background_scene", scene="mixed_same")(s.replace(meta={"contexts": ["lava"]}))
    with pytest.raises(ShiftbenchError, match="non-empty list"):
        sb.create_shift("background_scene", scene="mixed_rand")(s.replace(meta={"contexts": []}))
    with pytest.raises(ShiftbenchError, match="unknown object"):
        sb.create_shift("background_scene", scene="mixed_rand")(s.replace(meta={"object_id": "unicorn"}))


def test_background_only_removes_the_object_and_keeps_the_rest(obj):
    shift = sb.create_shift("background_only")
    out = shift(obj)
    hole = dilate(obj.mask, shift.dilation)
    assert np.array_equal(out.image[~hole], obj.image[~hole])
    assert np.abs(out.image[obj.mask].astype(int) - obj.image[obj.mask].astype(int)).mean() > 10
    mean = sb.create_shift("background_only", fill="mean")(obj).image
    assert len(np.unique(mean[hole].reshape(-1, 3), axis=0)) == 1
    assert shift.keeps == frozenset({"label"})


def test_instance_maps_and_provider_masks(obj):
    inst = obj.replace(mask=obj.mask.astype(np.int32) * 2)
    out = sb.create_shift("background_color")(inst, seed=0)
    assert np.array_equal(out.image[obj.mask], obj.image[obj.mask])
    # without a mask, "auto" asks U2-Net-p; the object it finds is kept exactly
    shift = sb.create_shift("background_color", color="green")
    bare = shift(obj.replace(mask=None), seed=0)
    found = shift.object_mask(obj.replace(mask=None))
    assert np.array_equal(bare.image[found], obj.image[found])
    assert (found & obj.mask).sum() / (found | obj.mask).sum() > 0.6
    gc = sb.create_shift("background_color", mask="grabcut")
    assert gc.config["mask"] == "grabcut"
    with pytest.raises(ShiftbenchError, match="needs samples with a mask"):
        sb.create_shift("background_color", mask="ground_truth")(obj.replace(mask=None))


def test_bad_masks_and_params_get_clear_errors():
    s = make_sample()
    shift = sb.create_shift("background_texture", texture=2)
    with pytest.raises(ShiftbenchError, match="empty"):
        shift(s.replace(mask=np.zeros(s.size, bool)))
    with pytest.raises(ShiftbenchError, match="whole image"):
        shift(s.replace(mask=np.ones(s.size, bool)))
    wrong = s.replace()
    wrong.mask = np.ones((5, 5), bool)  # set after construction, past Sample's own check
    with pytest.raises(ShiftbenchError, match="does not match"):
        shift(wrong)
    with pytest.raises(ShiftbenchError, match="red, green, blue or colorful"):
        sb.create_shift("background_color", color="purple")
    with pytest.raises(ShiftbenchError, match="texture must be"):
        sb.create_shift("background_texture", texture=5)
    with pytest.raises(ShiftbenchError, match="unknown mask provider"):
        sb.create_shift("background_color", mask="sam2")
    with pytest.raises(ShiftbenchError, match="dilation"):
        sb.create_shift("background_color", dilation=-2)
    with pytest.raises(ShiftbenchError, match="takes no parameters|unexpected|color"):
        sb.create_shift("object_only", color="red")


def test_every_background_shift_has_an_object_pixel_test():
    # the object-pixel check runs here for compose, in test_background_adversarial.py for adversarial_texture
    # and in test_background_diffusion.py for the diffusion backends; background_only removes the object and
    # is checked the other way round (everything outside the dilated mask kept)
    covered = {name for name, _ in COMPOSE} | {"adversarial_texture", "background_inpaint", "adversarial_diffusion",
                                               "background_only"}
    assert {e.name for e in SHIFTS.entries() if e.meta.get("group") == "background"} == covered
