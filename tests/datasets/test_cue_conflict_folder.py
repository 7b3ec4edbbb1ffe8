"""The cue-conflict folder reader (datasets/cue_conflict_folder.py) over generated layouts: both classes from the
path, images without a conflict marked, detection against the image-folder reader, and one line for a bad name."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import shiftbench as sb
from shiftbench.datasets.cue_conflict_folder import CueConflictFolder, parse_stimulus_name
from shiftbench.datasets.imagefolder import ImageFolder
from shiftbench.decisions import geirhos16
from shiftbench.errors import ShiftbenchError

CATEGORIES = geirhos16().space.class_names
SUBSET = Path(__file__).resolve().parents[1] / "data" / "cue-conflict-subset"


def write(root: Path, rel: str, value: int = 0) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value % 256, np.uint8)).save(path)


stimulus = st.tuples(st.sampled_from(CATEGORIES), st.integers(1, 12), st.sampled_from(CATEGORIES), st.integers(1, 12),
                     st.sampled_from([".png", ".PNG", ".jpg"]))


@given(st.lists(stimulus, min_size=1, max_size=12, unique_by=lambda s: s[:4]))
def test_generated_layouts_read_both_classes_from_the_path(stimuli):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "stimuli"
        expected = {}
        for k, (shape, i, texture, j, ext) in enumerate(stimuli):
            rel = f"{shape}/{shape}{i}-{texture}{j}{ext}"
            write(root, rel, k)
            expected[rel] = (shape, texture, f"{shape}{i}", f"{texture}{j}")
        (root / "README.txt").write_text("not an image")  # beside the folders: ignored
        (root / stimuli[0][0] / ".hidden.png").write_bytes(b"")  # hidden: ignored
        ds = sb.load_dataset(str(root))
        assert isinstance(ds, CueConflictFolder) and len(ds) == len(expected)
        assert [ds.sample_id(i) for i in range(len(ds))] == sorted(expected)
        for i in range(len(ds)):
            s = ds.load(i)
            shape, texture, shape_image, texture_image = expected[s.id]
            assert (s.label, s.class_name) == (CATEGORIES.index(shape), shape)
            assert s.meta["texture_label"] == CATEGORIES.index(texture) and s.meta["texture_class"] == texture
            assert (s.meta["shape_image"], s.meta["texture_image"]) == (shape_image, texture_image)
            assert s.meta["cue"] == ("no_conflict" if shape == texture else "conflict")
        assert ds.labels_used() == {CATEGORIES.index(v[0]) for v in expected.values()}
        assert ds.label_space.name == "geirhos16" and ds.decision_map.aggregation == "mean"


def test_the_shipped_subset_is_detected_and_read():
    ds = sb.load_dataset(str(SUBSET))
    assert isinstance(ds, CueConflictFolder) and len(ds) == 32 and ds.labels_used() == set(range(16))
    cues = [ds.load(i).meta["cue"] for i in range(len(ds))]
    assert cues.count("no_conflict") == 2  # bear1-bear3 and car1-car2
    assert "30 cue conflicts and 2 without" in ds.description
    assert sb.load_dataset(str(SUBSET), aggregation="max").decision_map.aggregation == "max"
    as_folder = sb.load_dataset(str(SUBSET), format="imagefolder")  # the layout can still be read as plain folders
    assert isinstance(as_folder, ImageFolder) and len(as_folder) == 32


def test_other_folders_stay_image_folders(tmp_path):
    write(tmp_path / "a", "cat/cat1-dog2.png")
    write(tmp_path / "a", "tiger/tiger1-dog2.png")  # a folder that is no category: not the stimuli layout
    write(tmp_path / "b", "cat/photo1.png")  # category folders, but no stimulus name
    for name in ("a", "b"):
        assert not CueConflictFolder.detect(tmp_path / name)
        assert isinstance(sb.load_dataset(str(tmp_path / name)), ImageFolder)


@pytest.mark.parametrize("rel, needle", [
    ("cat/photo.png", "cat/photo.png: expected <shape image>-<texture image>"),
    ("cat/cat1-elephant.png", "cat/cat1-elephant.png: expected <shape image>-<texture image>"),
    ("cat/cat1-tiger2.png", "cat/cat1-tiger2.png: texture class tiger is not one of the 16 categories"),
    ("cat/cat1-bottel2.png", "texture class bottel is not one of the 16 categories (did you mean 'bottle'?)"),
    ("cat/dog1-bird2.png", "cat/dog1-bird2.png: the shape image dog1 is not of its folder's class cat"),
    ("cat/cat1-bird2-x.png", "expected <shape image>-<texture image>"),
])
def test_a_bad_name_is_one_line_naming_the_file(tmp_path, rel, needle):
    write(tmp_path, "cat/cat2-dog1.png")
    write(tmp_path, rel)
    with pytest.raises(ShiftbenchError) as exc:
        sb.load_dataset(str(tmp_path))
    message = str(exc.value)
    assert needle in message and "\n" not in message and message.startswith("cue-conflict folder: ")


def test_bad_reader_arguments_are_one_line(tmp_path):
    write(tmp_path, "cat/cat1-dog1.png")
    with pytest.raises(ShiftbenchError, match=r"aggregation: unknown 'avg'; choose from mean, max, sum"):
        sb.load_dataset(str(tmp_path), aggregation="avg")
    write(tmp_path, "tiger/x.png")
    with pytest.raises(ShiftbenchError, match="folder tiger is not one of the 16 categories"):
        sb.load_dataset(str(tmp_path), format="cue-conflict-folder")
    with pytest.raises(ShiftbenchError, match="has no category folders"):
        sb.load_dataset(str(tmp_path / "cat"), format="cue-conflict-folder")


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=12))
def test_any_name_parses_or_is_refused_in_one_line(stem):
    rel = f"cat/{stem}.png"
    try:
        shape, texture, _, _ = parse_stimulus_name(rel, CATEGORIES)
    except ShiftbenchError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc) and str(exc).startswith("cue-conflict folder: ")
    else:
        assert shape == "cat" and texture in CATEGORIES
