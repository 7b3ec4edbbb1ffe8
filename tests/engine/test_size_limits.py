"""Issue 36 item A: one stated limit on the size of every image a user's size makes (shiftbench.resize.LIMIT:
16384 px per side, 8192 x 8192 px in all), checked where the size is given, before any work.

A resize or crop in a spec's ``preprocess:`` section, ``generate --resize/--crop``, the Python
``Preprocessing``, a model's ``Preprocess`` (input size, resize size), torchvision's ``resize_size`` /
``crop_size``, a diffusion shift's ``size``, the retrieval models' ``image_size``: any int, float, str,
negative, zero, bool or huge value either works (within the limit) or is refused in one ShiftbenchError line
naming the key, never a MemoryError from Pillow nor another exception.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.datasets.preprocess import Preprocessing
from shiftbench.engine.spec import PreprocessSection, preprocess_section
from shiftbench.errors import ImageError, ShiftbenchError, SpecError
from shiftbench.models.base import Preprocess
from shiftbench.resize import LIMIT, MAX_PIXELS, MAX_SHORTER, MAX_SIDE, SizeError, resize
from shiftbench.sample import Sample

from conftest import make_image

EXAMPLES = 500
PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# every kind of value a user may write where a size goes: ints about the limits and far past them, negatives,
# zero, bools, floats (whole, fractional, inf, nan), numeric and other strings, None, lists and odd containers
EDGES = [MAX_SHORTER - 1, MAX_SHORTER, MAX_SHORTER + 1, MAX_SIDE - 1, MAX_SIDE, MAX_SIDE + 1, MAX_PIXELS,
         10 ** 6, 10 ** 9, 2 ** 31, 2 ** 63, 10 ** 30]
INTS = st.one_of(st.integers(1, 64), st.integers(-3, 0), st.integers(65, 20000),
                 st.sampled_from(EDGES), st.integers(-(10 ** 40), 10 ** 40))
OTHERS = st.one_of(
    st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([224.0, 256.5, -1.0, 1e6, 1e300]),
    st.text(max_size=8), st.sampled_from(["256", "1e6", "1000000", "224,224", "", " "]),
)
SCALARS = st.one_of(INTS, INTS, OTHERS)  # ints half of the time or more: sizes that work are drawn too
SIZES = st.one_of(INTS, st.tuples(INTS, INTS), st.lists(INTS, min_size=2, max_size=2), SCALARS,
                  st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=3), SCALARS, max_size=2))
MAYBE = st.one_of(st.none(), INTS, st.tuples(INTS, INTS), SIZES)  # a key left out, or any value
SMALL = st.tuples(st.integers(1, 64), st.integers(1, 64))


def within(height: int, width: int) -> bool:
    return height <= MAX_SIDE and width <= MAX_SIDE and height * width <= MAX_PIXELS


def one_line(exc: BaseException, key: str) -> str:
    text = str(exc)
    assert "\n" not in text and key in text, text
    return text


@PROPS
@given(resize=MAYBE, crop=MAYBE)
def test_preprocess_section_sizes_work_within_the_limit_or_are_one_line(resize, crop):
    """Promise: a spec's (and generate's) preprocess resize and crop, whatever their value, are accepted within
    the limit or refused in one SpecError line naming preprocess.resize / preprocess.crop, at parse time."""
    value = {k: v for k, v in (("resize", resize), ("crop", crop)) if v is not None}
    try:
        section = preprocess_section(value, "preprocess")
    except SpecError as exc:
        text = one_line(exc, "preprocess.")
        assert text.startswith(("preprocess.resize: ", "preprocess.crop: ")), text
        event("refused: over the limit" if "over the limit" in text else "refused: not a size")
        return
    event("accepted")
    if section is None:
        assert not value
        return
    assert isinstance(section, PreprocessSection)
    if section.resize is not None:
        assert type(section.resize) is int and 1 <= section.resize <= MAX_SHORTER
    if section.crop is not None:
        assert within(*section.crop) and min(section.crop) >= 1
    Preprocessing(section.resize, section.crop, section.interpolation or "bilinear")  # the same values pass


@PROPS
@given(resize=MAYBE, crop=MAYBE, h=st.integers(1, 12),
       w=st.integers(1, 12))
def test_python_preprocessing_sizes_work_or_are_one_line(resize, crop, h, w):
    """Promise: ``Preprocessing(resize, crop)`` from Python refuses a size over the limit (or not a size) in one
    ShiftbenchError line naming resize / crop; one it accepts runs on an image, or refuses that image in one
    ImageError line (a crop larger than it, a resize that makes a thin image too long)."""
    try:
        transform = Preprocessing(resize, crop)
    except ShiftbenchError as exc:
        one_line(exc, "resize" if str(exc).startswith("resize") else "crop")
        assert str(exc).startswith(("resize: ", "crop: ")), str(exc)
        event("refused: over the limit" if "over the limit" in str(exc) else "refused: not a size")
        return
    if transform.resize is not None and transform.resize > 64:  # the size itself is what is tested: keep it cheap
        transform = Preprocessing(None, transform.crop)
    sample = Sample(image=make_image(h, w), label=0, id="thin")
    try:
        out = transform.apply(sample)
    except ImageError as exc:
        one_line(exc, "sample thin")
        event("accepted, the image refused")
        return
    event("accepted and applied")
    assert out.image.dtype == np.uint8 and within(*out.image.shape[:2])


def test_a_resize_that_makes_a_thin_image_too_long_is_one_line_before_pillow():
    """Promise: a resize within the limit that would make one image over it (a 2 x 3000 strip, shorter side to
    8192) is refused for that sample in one ImageError line (on_error: skip leaves it out), before Pillow."""
    sample = Sample(image=np.zeros((2, 3000, 3), np.uint8), label=0, id="strip.png")
    with pytest.raises(ImageError) as err:
        Preprocessing(resize=MAX_SHORTER).apply(sample)
    assert str(err.value) == (f"sample strip.png: its 2x3000 px with the shorter side resized to {MAX_SHORTER} "
                              f"would be {MAX_SHORTER}x{MAX_SHORTER * 1500} px, over the limit of {LIMIT}; "
                              "resize it less")
    with pytest.raises(SizeError, match=r"^resizing a 2x3000 image: 8192x12288000 px is over the limit of 16384"):
        resize(sample.image, (MAX_SHORTER, MAX_SHORTER * 1500))  # the one resize checks its output too


@PROPS
@given(size=st.one_of(SMALL, SIZES), resize_size=st.one_of(st.none(), SMALL, MAYBE),
       crop_fraction=st.sampled_from([1.0, 0.875, 0.5, 1e-3, 1e-9]))
def test_model_preprocess_sizes_work_or_are_one_line(size, resize_size, crop_fraction):
    """Promise: a model's declared input transform (``Preprocess``: size, resize_size, and timm's size /
    crop_fraction when no resize size is given) is within the limit or refused in one SizeError line (a
    ShiftbenchError) naming Preprocess.size or Preprocess.resize_size; an accepted one resizes an image."""
    try:
        p = Preprocess(size=size, mean=(0, 0, 0), std=(1, 1, 1), resize_size=resize_size,
                       crop_fraction=crop_fraction)
    except SizeError as exc:
        assert isinstance(exc, ShiftbenchError)
        text = one_line(exc, "Preprocess.")
        assert text.startswith(("Preprocess.size", "Preprocess.resize_size")), text
        event("refused: over the limit" if "over the limit" in text else "refused: not a size")
        return
    event("accepted")
    assert within(*p.size)
    scale = p.scale_size
    assert (scale <= MAX_SHORTER) if isinstance(scale, int) else within(*scale)
    if max(p.size) <= 48 and max(scale if isinstance(scale, tuple) else (scale,)) <= 48:
        assert p([make_image(20, 30)]).shape == (1, 3, *p.size)


@PROPS
@given(size=st.one_of(SCALARS, st.integers(0, 2100).map(lambda k: 8 * k)))
def test_shift_and_retrieval_sizes_work_or_are_one_line(size):
    """Promise: a diffusion shift's working ``size`` and a retrieval model's ``image_size`` are accepted
    within the limit or refused in one ShiftbenchError line naming the key (the shift is lazy: nothing loads)."""
    try:
        shift = sb.create_shift("background_inpaint", size=size)
    except ShiftbenchError as exc:
        assert one_line(exc, "size").startswith("size must be a multiple of 8 px in 16..8192"), str(exc)
        event("shift refused")
    else:
        event("shift accepted")
        assert 16 <= shift.sampler.size <= MAX_SHORTER and shift.sampler.size % 8 == 0
    from shiftbench.models.retrieval import _encoders

    if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= MAX_SHORTER:
        return  # a valid size would load the bundled encoder: the refusals are what is tested here
    with pytest.raises(ShiftbenchError) as err:
        _encoders(None, None, size)
    assert one_line(err.value, "image_size").startswith("image_size: ")


@pytest.mark.parametrize("key,value", [("resize_size", 10 ** 6), ("crop_size", 10 ** 6), ("resize_size", "256"),
                                       ("crop_size", 0), ("resize_size", True)])
def test_torchvision_sizes_are_refused_before_the_model_is_built(key, value):
    """Promise: torchvision's resize_size / crop_size over the limit (or not a size) are one line naming the key,
    before any weights are read or a module is built."""
    pytest.importorskip("torchvision")
    with pytest.raises(ShiftbenchError) as err:
        sb.create_model("torchvision:resnet18", pretrained=False, **{key: value})
    assert one_line(err.value, key).startswith(f"torchvision:resnet18: {key}: ")


# -- through the command line ------------------------------------------------------------------------------------
def run_cli(args, capsys):
    from shiftbench.cli import main

    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_generate_resize_of_a_million_pixels_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Promise: ``generate --resize 1000000`` is one ``error:`` line naming generate.resize and the limit, exit
    status 2, and nothing written (no out folder); so is a crop over the limit."""
    monkeypatch.chdir(tmp_path)
    base = ["generate", "--dataset", "objects", "--shift", "gaussian_noise", "--severity", "1", "--limit", "1",
            "--out", str(tmp_path / "out")]
    code, _, err = run_cli(base + ["--resize", "1000000"], capsys)
    assert one_error_line(code, err) == (
        f"error: generate.resize: 1000000 resizes an image to at least 1000000x1000000 px, over the limit of "
        f"{LIMIT}; give at most {MAX_SHORTER}")
    code, _, err = run_cli(base + ["--crop", "20000,2"], capsys)
    assert one_error_line(code, err) == f"error: generate.crop: 20000x2 px is over the limit of {LIMIT}"
    assert list(tmp_path.iterdir()) == []


def test_generate_resize_that_makes_the_first_image_too_long_exits_2_before_any_work(tmp_path, capsys):
    """Promise: a resize within the limit that makes an image of the dataset over it stops generate before any
    work (its estimate reads the first image), in one line naming the sample; nothing is written."""
    from PIL import Image

    (tmp_path / "data" / "cat").mkdir(parents=True)
    Image.fromarray(np.zeros((2, 300, 3), np.uint8)).save(tmp_path / "data" / "cat" / "a.png")
    code, _, err = run_cli(["generate", "--dataset", str(tmp_path / "data"), "--shift", "gaussian_noise",
                            "--severity", "1", "--resize", str(MAX_SHORTER), "--out", str(tmp_path / "out")], capsys)
    line = one_error_line(code, err)
    assert line.startswith("error: sample cat/a.png: its 2x300 px with the shorter side resized to 8192 would be")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("section,key", [({"resize": 1000000}, "resize"), ({"resize": 256, "crop": [224, 10 ** 6]},
                                                                           "crop")])
def test_a_spec_with_a_huge_preprocess_size_fails_the_dry_run_in_one_line(tmp_path, capsys, section, key):
    """Promise: a spec whose preprocess size is over the limit fails ``evaluate --dry-run`` (and the run) with
    exit status 2 and one ``error:`` line naming the spec, the key and the limit, before any store is opened."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"dataset": "objects", "models": [{"name": "dummy_classifier",
                                                                  "params": {"label_space": 2}}],
                                "shifts": ["clean"], "metrics": ["top1"], "preprocess": section}))
    lines = []
    for extra in (["--dry-run"], ["--store", str(tmp_path / "r.db")]):
        code, _, err = run_cli(["evaluate", "--config", str(spec), *extra], capsys)
        lines.append(one_error_line(code, err))
    assert lines[0] == lines[1]
    assert lines[0].startswith(f"error: {spec}: preprocess.{key}: ") and f"over the limit of {LIMIT}" in lines[0]
    assert not (tmp_path / "r.db").exists()


def test_the_limit_is_the_documented_one():
    """Promise: the limit docs/preprocess.md states is the one the code checks."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "preprocess.md").read_text()
    assert f"{MAX_SIDE} px per side" in page and f"{MAX_SHORTER} x {MAX_SHORTER}" in page
    assert MAX_SHORTER == math.isqrt(MAX_PIXELS) and LIMIT == f"{MAX_SIDE} px per side and {MAX_PIXELS} px in all " \
                                                              f"({MAX_SHORTER}x{MAX_SHORTER})"
