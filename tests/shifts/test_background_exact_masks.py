"""Issue 27 item 8: background shifts on an exact mask leave nothing of the old background.

An exact mask (the sample's own: the ``objects`` alpha cut-outs, COCO / VOC annotations) is used as it is,
with no feathered band: at severity 5 every pixel outside the mask is the new background's, so the result
does not depend on the old background at all (over generated images and masks). An estimated mask (a
provider's, or a sample's own with ``meta["mask_exact"] = False``) keeps the 6 px band. Either way the
object's pixels are copied byte for byte, and the change from the former composite is confined to the band.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shiftbench as sb
from shiftbench.conditioning.masks import DEFAULT_DILATION, create_mask_provider, dilate, mask_is_exact
from shiftbench.errors import ShiftbenchError
from shiftbench.sample import Sample
from shiftbench.shifts.background.base import blend_background

# every compose background that lays a new picture behind the object (background_only removes the object)
COMPOSE = [("background_color", {"color": "red"}), ("background_color", {"color": "colorful"}),
           *[("background_texture", {"texture": t}) for t in (1, 2, 3, 4)],
           ("background_scene", {}), ("background_scene", {"scene": "meadow"}),
           ("background_scene", {"scene": "mixed_same"}), ("background_scene", {"scene": "mixed_rand"}),
           ("object_only", {})]
SHIFTS = {f"{name} {params}": sb.create_shift(name, **params) for name, params in COMPOSE}


def as_uint8(background: np.ndarray) -> np.ndarray:
    """A background as the composite rounds it (float backgrounds: rounded and saturated)."""
    import cv2

    return background if background.dtype == np.uint8 else cv2.convertScaleAbs(np.maximum(background, 0))


@st.composite
def scenes(draw) -> tuple[Sample, Sample]:
    """Two samples with the same object (pixels inside the same mask) on two unrelated old backgrounds."""
    h, w = draw(st.integers(16, 40)), draw(st.integers(16, 40))
    mask = draw(hnp.arrays(np.bool_, (h, w)))
    ys, xs = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
    mask[ys, xs] = True  # an object ...
    mask[(ys + h // 2) % h, (xs + w // 2) % w] = False  # ... and a background, however the array was drawn
    one = draw(hnp.arrays(np.uint8, (h, w, 3)))
    other = draw(hnp.arrays(np.uint8, (h, w, 3)))
    other[mask] = one[mask]
    meta = {"contexts": ["grass"]}  # the mixed scene pools need the object's contexts
    return (Sample(image=one, label=1, mask=mask, id="gen", meta=meta),
            Sample(image=other, label=1, mask=mask, id="gen", meta=meta))


@settings(max_examples=40)
@given(pair=scenes(), which=st.sampled_from(sorted(SHIFTS)), seed=st.integers(0, 2**31))
def test_an_exact_mask_leaves_no_old_background(pair, which, seed):
    one, other = pair
    shift = SHIFTS[which]
    assert mask_is_exact(one) and shift.band(one) == 0
    a, b = shift(one, severity=5, seed=seed), shift(other, severity=5, seed=seed)
    assert np.array_equal(a.image[one.mask], one.image[one.mask])  # the object, byte for byte
    assert np.array_equal(a.image, b.image)  # nothing of either old background is left anywhere
    bg = as_uint8(shift.background(one, shift.draw(one, 5, seed)))
    assert np.array_equal(a.image[~one.mask], bg[~one.mask])  # outside the mask: the new background alone


@settings(max_examples=25)
@given(pair=scenes(), severity=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_the_change_is_confined_to_the_former_band(pair, severity, seed):
    """Against the former composite (a 6 px band for every mask): the same bytes on the object and beyond
    the band; inside the band the old background's weight is now 1 - w, as everywhere else."""
    sample, _ = pair
    shift = SHIFTS["background_color {'color': 'red'}"]
    params = shift.draw(sample, severity, seed)
    bg = shift.background(sample, params)
    now = shift.apply(sample, params).image
    before = blend_background(sample.image, bg, sample.mask, params["weight"], DEFAULT_DILATION)
    flat = blend_background(sample.image, bg, sample.mask, params["weight"], 0)
    ring = dilate(sample.mask, DEFAULT_DILATION) & ~sample.mask
    assert np.array_equal(now, flat)
    assert np.array_equal(now[~ring], before[~ring])


def test_an_estimated_mask_keeps_the_band():
    obj = sb.load_dataset("objects").load(5)
    estimated = obj.replace(meta={**obj.meta, "mask_exact": False})
    shift = sb.create_shift("background_color", color="blue")
    assert shift.band(obj) == 0 and shift.band(estimated) == DEFAULT_DILATION
    assert sb.create_shift("background_color", mask="grabcut").band(obj) == DEFAULT_DILATION  # a provider's
    assert sb.create_shift("background_color", mask="u2netp").band(obj.replace(mask=None)) == DEFAULT_DILATION
    exact, feathered = shift(obj, severity=5, seed=0).image, shift(estimated, severity=5, seed=0).image
    ring = dilate(obj.mask, DEFAULT_DILATION) & ~obj.mask
    assert np.array_equal(exact[obj.mask], obj.image[obj.mask])
    assert np.array_equal(feathered[obj.mask], obj.image[obj.mask])
    assert np.array_equal(exact[~ring], feathered[~ring])
    # in the band the estimated composite still shows the old scene, fading out with the distance
    old_share = np.abs(feathered[ring].astype(int) - exact[ring].astype(int)).sum(-1) > 0
    assert old_share.mean() > 0.8
    bg = shift.background(obj, shift.draw(obj, 5, 0))
    assert np.array_equal(feathered, blend_background(obj.image, bg, obj.mask, 1.0, DEFAULT_DILATION))


def test_mask_provenance():
    s = sb.load_dataset("objects").load(0)
    assert mask_is_exact(s) and create_mask_provider("ground_truth")(s).exact
    assert not create_mask_provider("grabcut")(s).exact  # estimated, whatever its quality
    assert not mask_is_exact(s.replace(meta={**s.meta, "mask_exact": False}))
    assert not mask_is_exact(s.replace(mask=None))
    bad = s.replace(meta={**s.meta, "mask_exact": "yes"})
    with pytest.raises(ShiftbenchError, match="meta 'mask_exact' must be true or false"):
        sb.create_shift("background_color").check_sample(bad)


def test_the_attack_leaves_no_old_background_on_an_exact_mask():
    pytest.importorskip("torch")
    obj = sb.load_dataset("objects", size=64).load(3)
    shift = sb.create_shift("adversarial_texture", steps=1)
    params = shift.draw(obj, 1, 0)
    out = shift.apply(obj, params).image
    bg, _ = shift.optimise(obj, params)  # the same attack again (seeded, one thread): the same background
    assert np.array_equal(out[obj.mask], obj.image[obj.mask])
    assert np.array_equal(out[~obj.mask], as_uint8(bg)[~obj.mask])


def test_the_contact_sheet_shows_both_composites(tmp_path):
    """tools/contact_sheet.py --shift: each cell the composite now | with the band (docs/img/objects_background_red.png)."""
    import subprocess
    import sys
    from pathlib import Path

    from PIL import Image

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "sheet.png"
    subprocess.run([sys.executable, str(repo / "tools" / "contact_sheet.py"), "--shift", "background_color",
                    "--params", '{"color": "red"}', "--n", "2", "--cols", "2", "--out", str(out)],
                   check=True, capture_output=True, env={"PYTHONPATH": str(repo / "src"), "PATH": "/usr/bin:/bin"})
    with Image.open(out) as img:
        sheet = np.asarray(img.convert("RGB"))
    assert sheet.shape == (224 + 14 + 12, 2 * (2 * 224 + 18), 3)
    ds = sb.load_dataset("objects")
    first = ds.load(0)
    now = sb.create_shift("background_color", color="red")(first, severity=5, seed=0).image
    assert np.array_equal(sheet[6 + 14:6 + 14 + 224, 6:6 + 224], now)  # the left image of the first cell
