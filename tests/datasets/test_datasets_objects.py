"""The built-in `objects` dataset (shipped assets, exact masks, determinism, rendering API) and imagenet-photos."""

from __future__ import annotations

import csv
import doctest
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from shiftbench.datasets import objects as O
from shiftbench.datasets.imagenet import imagenet_classes
from shiftbench.datasets.photos import foolbox_data_dir
from shiftbench.errors import ShiftbenchError
from shiftbench.registry import DATASETS

REPO = Path(__file__).resolve().parents[2]
ASSETS = Path(str(resources.files("shiftbench").joinpath("data/objects")))


@pytest.fixture(scope="module")
def dataset() -> O.ObjectsDataset:
    return sb.load_dataset("objects")


def read_tsv(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


# -- assets ------------------------------------------------------------------------------------------
def test_assets_size_count_licences_and_attribution():
    files = [p for p in ASSETS.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 15e6
    assert len(O.object_ids()) >= 60 and len(O.scene_ids()) >= 20
    assert (ASSETS / "licenses" / "GPL-2.txt").read_text().split("\n")[0].strip() == "GNU GENERAL PUBLIC LICENSE"
    attributed = {line.split("\t")[0] for line in (ASSETS / "ATTRIBUTION.tsv").read_text().splitlines()
                  if line and not line.startswith("#")} - {"asset"}
    images = {p.relative_to(ASSETS).as_posix() for p in files if p.suffix == ".png"}
    assert attributed == images  # every shipped image is attributed, nothing attributed is missing
    for oid in O.object_ids():
        cut = O.cutout(oid)
        assert cut.ndim == 3 and cut.shape[2] == 4 and max(cut.shape[:2]) <= 256
        assert (cut[..., 3] >= O.ALPHA_THRESHOLD).mean() > 0.05  # a real object, not an empty stamp
    for sid in O.scene_ids():
        assert 110 <= min(O.scene(sid).shape[:2]) <= 320  # crops smaller than 320 px are not upscaled


def test_curation_list_matches_shipped_objects_and_imagenet():
    curation = read_tsv(REPO / "tools" / "objects_curation.tsv")
    classes = imagenet_classes()
    assert [r["object_id"] for r in curation] == O.object_ids()
    for row in curation:
        info = O.object_info(row["object_id"])
        assert info.imagenet_index == int(row["imagenet_index"])
        cls = classes[info.imagenet_index]
        assert (cls.wnid, cls.name) == (info.wnid, info.imagenet_name) == (row["wnid"], row["imagenet_name"])
        assert row["check"].split(":")[0] in ("exact", "close") and len(row["check"]) > 20
    assert [r["scene_id"] for r in read_tsv(REPO / "tools" / "objects_scenes.tsv")] == O.scene_ids()


# -- samples -----------------------------------------------------------------------------------------
def expected_layer(object_id: str, p: O.Placement) -> tuple[np.ndarray, np.ndarray]:
    """Recompute the placed object from the cut-out independently of the library's compositing."""
    rgba = np.asarray(Image.fromarray(O.cutout(object_id)).resize((p.width, p.height), Image.Resampling.BILINEAR))
    if p.flip:
        rgba = rgba[:, ::-1]
    h, w = p.canvas
    big = np.zeros((h + 2 * 600, w + 2 * 600, 4), np.uint8)  # pad so off-canvas placements crop simply
    big[600 + p.y:600 + p.y + p.height, 600 + p.x:600 + p.x + p.width] = rgba
    crop = big[600:600 + h, 600:600 + w]
    return crop[..., :3], crop[..., 3] >= 128


def test_every_sample_mask_matches_alpha_exactly(dataset):
    assert len(dataset) == 376 == DATASETS.entry("objects").meta["size"]
    scenes_seen = set()
    for i in range(len(dataset)):
        s = dataset.load(i)
        p = dataset.placement(i)
        rgb, mask = expected_layer(s.meta["object_id"], p)
        np.testing.assert_array_equal(s.mask, mask)
        assert s.mask.dtype == np.bool_ and s.image.shape == (224, 224, 3) and mask.sum() > 50
        np.testing.assert_array_equal(s.image[mask], rgb[mask])
        scene = O.background_image(s.meta["scene_id"], (224, 224))
        np.testing.assert_array_equal(s.image[~mask], scene[~mask])
        ys, xs = np.nonzero(mask)
        np.testing.assert_array_equal(s.boxes, [[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]])
        assert 0 <= s.label < 1000 and imagenet_classes()[s.label].wnid == s.meta["wnid"]
        assert s.class_name == imagenet_classes()[s.label].name
        assert s.caption == f"{O.object_info(s.meta['object_id']).phrase} {O.scene_info(s.meta['scene_id']).phrase}"
        assert s.id == dataset.sample_id(i) and s.meta["placement"] == p.to_dict()
        # wholly inside the canvas, longer side within the scale range
        assert p.x >= 0 and p.y >= 0 and p.x + p.width <= 224 and p.y + p.height <= 224
        assert 0.45 * 224 - 1 <= max(p.width, p.height) <= 0.8 * 224 + 1
        scenes_seen.add(s.meta["scene_id"])
    assert scenes_seen == set(O.scene_ids())
    assert len({dataset.sample_id(i) for i in range(len(dataset))}) == len(dataset)


def digest(ds: O.ObjectsDataset, indices) -> str:
    h = hashlib.sha256()
    for i in indices:
        s = ds.load(i)
        h.update(s.image.tobytes())
        h.update(s.mask.tobytes())
        h.update(json.dumps(s.meta, sort_keys=True).encode())
    return h.hexdigest()


def test_same_seed_same_bytes_and_other_seed_differs():
    indices = range(0, 376, 7)
    a = digest(sb.load_dataset("objects", seed=3), indices)
    assert a == digest(sb.load_dataset("objects", seed=3), indices)
    assert a != digest(sb.load_dataset("objects", seed=4), indices)
    # the placement comes from PCG64 seeded by (seed, crc32 ids): identical on every platform
    assert sb.load_dataset("objects").placement(0).to_dict() == \
        {"x": 45, "y": 56, "width": 175, "height": 149, "canvas": [224, 224], "flip": False}


def test_natural_context_pairs_are_congruent_repeat_with_new_placements_and_stand_on_the_ground():
    ds = O.ObjectsDataset(seed=1)
    assert ds.context == "natural" and len(ds) == 4 * len(O.object_ids())
    for i in range(len(ds)):
        oid, sid = ds.pair(i)
        assert O.is_congruent(oid, sid), (oid, sid)
        assert set(O.object_info(oid).contexts) & set(O.scene_info(sid).contexts)
    # every context the objects use has at least three scenes; every object at least three congruent scenes
    assert all(len(O.congruent_scenes(oid)) >= 3 for oid in O.object_ids())
    used = {c for oid in O.object_ids() for c in O.object_info(oid).contexts}
    assert used <= set(O.CONTEXTS)
    for c in used:
        assert sum(c in O.scene_info(s).contexts for s in O.scene_ids()) >= 3, c
    assert set(O.congruent_scenes("orca")) == {"ocean_splash", "ocean_waves", "water_drop"}
    assert "ocean_waves" in O.incongruent_scenes("cow") and "meadow" not in O.incongruent_scenes("cow")
    # more placements than congruent scenes: the scenes repeat with new placements, ids say which repeat
    many = O.ObjectsDataset(objects=["orca"], scenes_per_object=7)
    ids = [many.sample_id(i) for i in range(len(many))]
    assert len(set(ids)) == 7 and sum("#1" in i for i in ids) == 3 and sum("#2" in i for i in ids) == 1
    assert len({many.placement(i) for i in range(7)}) == 7
    assert len(O.ObjectsDataset(scenes_per_object="all")) == sum(len(O.congruent_scenes(o)) for o in O.object_ids())
    # a ground object's bottom edge is below the ground line; an object on a scene that is only sky may fly
    for i in range(len(ds)):
        oid, sid = ds.pair(i)
        p = ds.placement(i)
        if set(O.scene_info(sid).contexts) & set(O.object_info(oid).contexts) != {"sky"}:
            assert p.y + p.height >= O.GROUND_LINE * 224, (oid, sid, p)
    # the former pairing (any scene) stays available
    rnd = O.ObjectsDataset(context="random")
    assert any(not O.is_congruent(*rnd.pair(i)) for i in range(len(rnd)))
    with pytest.raises(ShiftbenchError, match="no congruent scene"):
        O.ObjectsDataset(objects=["orca"], scenes=["meadow", "cliff"])
    with pytest.raises(ShiftbenchError, match="context must be"):
        O.ObjectsDataset(context="indoor")


def test_pairing_is_balanced_and_configurable():
    ds = O.ObjectsDataset(seed=1, context="random")
    pairs = [ds.pair(i) for i in range(len(ds))]
    per_object: dict[str, list[str]] = {}
    for oid, sid in pairs:
        per_object.setdefault(oid, []).append(sid)
    assert all(len(v) == len(set(v)) == 4 for v in per_object.values())  # distinct scenes per object
    counts = np.unique([sid for _, sid in pairs], return_counts=True)[1]
    assert counts.max() - counts.min() <= 1
    full = O.ObjectsDataset(scenes_per_object="all", context="random")
    assert len(full) == len(O.object_ids()) * len(O.scene_ids())
    assert len(set(full.pair(i) for i in range(len(full)))) == len(full)
    small = sb.load_dataset("objects", objects="*guitar*", scenes=["meadow", "cliff"], scenes_per_object=2, size=96,
                            context="random")
    assert len(small) == 6 and small.load(0).image.shape == (96, 96, 3)
    assert len(sb.load_dataset("objects", limit=10)) == 10
    # a pair keeps its placement when the selection changes
    sub = O.ObjectsDataset(objects=["zebra"], scenes_per_object="all", context="random")
    k = next(i for i in range(len(full)) if full.pair(i)[0] == "zebra")
    j = next(i for i in range(len(sub)) if sub.pair(i) == full.pair(k))
    assert sub.placement(j) == full.placement(k)
    with pytest.raises(ShiftbenchError, match="scenes_per_object"):
        O.ObjectsDataset(scenes_per_object=0)
    with pytest.raises(ShiftbenchError, match="did you mean 'zebra'"):
        O.ObjectsDataset(objects=["zebr"])
    with pytest.raises(ShiftbenchError, match="size"):
        O.ObjectsDataset(size=(3, 4))


# -- rendering API -----------------------------------------------------------------------------------
def test_render_same_object_on_any_background(dataset):
    i = 17
    clean = dataset.load(i)
    texture = np.random.default_rng(0).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    for background in ["cliff", "red", "#00ff00", (10, 20, 30), texture, Image.fromarray(texture)]:
        shifted = dataset.render(i, background)
        np.testing.assert_array_equal(shifted.mask, clean.mask)
        np.testing.assert_array_equal(shifted.image[clean.mask], clean.image[clean.mask])
        np.testing.assert_array_equal(shifted.image[~clean.mask],
                                      O.background_image(background, (224, 224))[~clean.mask])
        assert shifted.label == clean.label and shifted.meta["placement"] == clean.meta["placement"]
    red = dataset.render(i, "red")
    assert (red.image[~red.mask] == [255, 0, 0]).all() and red.caption.endswith("on a red background")
    exact = np.zeros((224, 224, 3), np.uint8)
    np.testing.assert_array_equal(O.background_image(exact), exact)  # canvas-sized arrays are used as is
    with pytest.raises(ShiftbenchError, match="neither a scene id nor a colour"):
        O.background_image("no-such-thing")
    with pytest.raises(ShiftbenchError, match="3 ints"):
        O.background_image((300, 0, 0))


def test_placement_round_trip_and_clipping():
    p = O.Placement(x=-30, y=150, width=120, height=100, canvas=(200, 240), flip=True)
    assert O.Placement.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    s = O.render("tiger", "meadow", p)
    rgb, mask = expected_layer("tiger", p)
    np.testing.assert_array_equal(s.mask, mask)
    np.testing.assert_array_equal(s.image[mask], rgb[mask])
    assert s.image.shape == (200, 240, 3) and s.boxes[0][0] == 0 and s.boxes[0][3] == 200
    off = O.render("tiger", "meadow", p.moved(x=500))
    assert not off.mask.any() and off.boxes.shape == (0, 4)
    with pytest.raises(ShiftbenchError, match="size must be >= 1"):
        O.Placement(0, 0, 0, 5)
    with pytest.raises(ShiftbenchError, match="unknown object"):
        O.render("unicorn")


def test_two_copies_and_recolouring_inside_the_mask():
    p = O.random_placement("lion", 224, np.random.default_rng(5), scale_range=(0.3, 0.4))
    q = p.moved(x=224 - p.width - p.x)
    two = O.render_many([("lion", p), ("lion", q)], background="dune_grass")
    assert set(np.unique(two.mask)) == {0, 1, 2} and two.meta["mask_type"] == "instance"
    assert len(two.boxes) == 2 and two.box_labels.tolist() == [291, 291] and two.label == 291
    mixed = O.render_many([("lion", p), ("zebra", q)], background=(0, 0, 0))
    assert mixed.label is None and mixed.class_name is None and mixed.box_labels.tolist() == [291, 340]
    one = O.render("lion", "dune_grass", q)
    np.testing.assert_array_equal(two.mask == 2, one.mask)
    # recolour: edit the layer inside its mask, then composite it on the scene
    rgb, mask = O.layer("lion", p)
    rgb[mask] = rgb[mask][:, ::-1]  # swap R and B inside the object only
    image, instances = O.composite(O.background_image("dune_grass"), [(rgb, mask)])
    plain = O.render("lion", "dune_grass", p)
    np.testing.assert_array_equal(instances == 1, plain.mask)
    np.testing.assert_array_equal(image[~plain.mask], plain.image[~plain.mask])
    np.testing.assert_array_equal(image[plain.mask], plain.image[plain.mask][:, ::-1])


def test_module_doctests():
    result = doctest.testmod(O)
    assert result.attempted >= 4 and result.failed == 0


def test_contact_sheet_command(tmp_path):
    out = tmp_path / "sheet.png"
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(REPO / "tools" / "contact_sheet.py"), "--out", str(out), "--n", "8",
                    "--cols", "4"], check=True, env=env, capture_output=True)
    with Image.open(out) as img:
        assert img.size == (4 * (2 * 224 + 18), 2 * (224 + 14 + 12))


def test_list_datasets_shows_description_size_annotations():
    for name in ("objects", "imagenet-photos"):
        entry = DATASETS.entry(name)
        assert entry.description and entry.meta["size"] > 0 and "label" in entry.meta["annotations"]
        assert not entry.meta.get("reader")


# -- imagenet-photos -----------------------------------------------------------------------------------
def test_imagenet_photos_from_a_wheel_file(tmp_path):
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    arrays = {}
    with zipfile.ZipFile(wheel, "w") as zf:
        for n, label in [(0, 340), (1, 8)]:
            arr = np.random.default_rng(n).integers(0, 256, (10, 12, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, format="PNG")
            zf.writestr(f"foolbox/data/imagenet_{n:02d}_{label}.png", buf.getvalue())
            arrays[label] = arr
        zf.writestr("foolbox/data/cifar10_00_3.png", b"not used")
    ds = sb.load_dataset("imagenet-photos", root=str(wheel))
    assert len(ds) == 2 and [ds.sample_id(i) for i in range(2)] == ["imagenet_00_340", "imagenet_01_8"]
    zebra = ds.load(0)
    assert zebra.label == 340 and zebra.class_name == "zebra" and zebra.mask is None
    np.testing.assert_array_equal(zebra.image, arrays[340])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShiftbenchError, match="no imagenet_"):
        sb.load_dataset("imagenet-photos", root=str(tmp_path / "empty"))


def test_imagenet_photos_from_installed_foolbox():
    if foolbox_data_dir() is None:
        pytest.skip("foolbox is not installed (CI installs it: pip install foolbox)")
    ds = sb.load_dataset("imagenet-photos")
    assert len(ds) == 20 and ds.num_classes == 1000
    labels = [ds.load(i).label for i in range(len(ds))]
    assert labels == [int(ds.sample_id(i).rsplit("_", 1)[1]) for i in range(20)]
    assert ds.load(4).class_name == "strawberry" and ds.load(17).class_name == "bald eagle"
