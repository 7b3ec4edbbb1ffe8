"""objects-cir: splits disjoint by object, every target equal to its edit rendered independently."""

from __future__ import annotations

import numpy as np
import pytest

from shiftbench.datasets import load, objects
from shiftbench.datasets.objects_cir import CATEGORIES, COLOURS, SPLITS, ObjectsCIR, plural, recolour, split_objects
from shiftbench.errors import ShiftbenchError


@pytest.fixture(scope="module")
def ds():
    return ObjectsCIR(split="val")


def _ref_placement(ds, q):
    oid, p = ds.recipe(q.meta["reference_id"])["items"][0]
    return oid, objects.Placement.from_dict(p)


def test_splits_are_disjoint_and_complete():
    parts = {s: set(split_objects(s)) for s in SPLITS}
    assert sum(len(p) for p in parts.values()) == len(objects.object_ids())
    assert set().union(*parts.values()) == set(objects.object_ids())
    assert not (parts["train"] & parts["test"]) and not (parts["val"] & parts["test"]) and not (parts["train"] & parts["val"])
    for split in SPLITS:
        d = ObjectsCIR(split=split, repeats=1)
        used = {oid for g in d.gallery_ids() for oid, _ in d.recipe(g)["items"]}
        assert used <= parts[split]  # swap and removal partners come from the same split


def test_structure_ids_and_categories(ds):
    assert len(ds) == 7 * len(ds.object_list)
    ids = [ds.sample_id(i) for i in range(len(ds))]
    assert len(set(ids)) == len(ids)
    gallery = set(ds.gallery_ids())
    counts = {c: 0 for c in CATEGORIES}
    for i in range(len(ds)):
        q = ds.load(i)
        counts[q.category] += 1
        assert q.target_id in gallery and q.meta["reference_id"] in gallery and q.target_id != q.meta["reference_id"]
        assert q.text in ds.phrasings(i) and len(ds.phrasings(i)) >= 4
        if q.category == "fine_grained":
            assert len(q.subset_ids) == 6 and q.target_id in q.subset_ids and set(q.subset_ids) <= gallery
        else:
            assert q.subset_ids is None
    assert counts == {c: (2 if c == "background" else 1) * len(ds.object_list) for c in CATEGORIES}


def test_same_seed_same_bytes_other_seed_other_scenes():
    a, b, c = ObjectsCIR(split="test"), ObjectsCIR(split="test"), ObjectsCIR(split="test", seed=1)
    assert a.gallery_ids() == b.gallery_ids()
    for i in (0, 9, 30):
        assert a.load(i).text == b.load(i).text
        assert np.array_equal(a.load(i).reference.image, b.load(i).reference.image)
    assert a.load(0).reference.id != c.load(0).reference.id


def test_every_target_is_its_rendered_edit(ds):
    for i in range(len(ds)):
        q = ds.load(i)
        ref, target = q.reference.image, ds.load_gallery(q.target_id).image
        oid, place = _ref_placement(ds, q)
        mask = objects.layer(oid, place)[1]
        recipe = ds.recipe(q.target_id)
        if q.category == "background":
            bg = recipe["background"]
            bg = tuple(bg) if isinstance(bg, list) else bg
            expected = objects.render(oid, bg, place).image
            assert np.array_equal(target, expected)
            assert np.array_equal(target[mask], ref[mask])  # the object is untouched
            assert not np.array_equal(target[~mask], ref[~mask])
        elif q.category in ("attribute", "fine_grained"):
            colour = q.target_id.rpartition("colour=")[2]
            assert colour in COLOURS and colour in q.text
            assert np.array_equal(target, recolour(ref, mask, COLOURS[colour]))
            assert np.array_equal(target[~mask], ref[~mask]) and not np.array_equal(target[mask], ref[mask])
        elif q.category == "removal":
            assert len(np.unique(q.reference.mask)) == 3  # background + two objects
            scene = recipe["background"]
            assert np.array_equal(target, objects.render(oid, scene, place).image)
            removed = q.reference.mask == 2
            assert np.array_equal(target[~removed], ref[~removed])
            partner = ds.recipe(q.meta["reference_id"])["items"][1][0]
            assert objects.object_info(partner).phrase.split(" ", 1)[-1] in q.text
        elif q.category == "numerical":
            count = len(recipe["items"])
            assert count in (2, 3) and {2: "two", 3: "three"}[count] in q.text.split()
            sample = ds.load_gallery(q.target_id)
            assert len(np.unique(sample.mask)) == count + 1
            assert np.array_equal(target[mask], ref[mask])  # the first copy stands where the object stood
            assert all(o == oid for o, _ in recipe["items"])
        elif q.category == "object_swap":
            other, p = recipe["items"][0]
            assert other != oid
            expected = objects.render(other, ds.recipe(q.meta["reference_id"])["background"],
                                      objects.Placement.from_dict(p)).image
            assert np.array_equal(target, expected)
            assert objects.object_info(other).phrase in q.text


def test_fine_grained_subset_differs_only_inside_the_mask(ds):
    i = next(i for i in range(len(ds)) if ds._queries[i]["category"] == "fine_grained")
    q = ds.load(i)
    oid, place = _ref_placement(ds, q)
    mask = objects.layer(oid, place)[1]
    images = [ds.load_gallery(s).image for s in q.subset_ids]
    for im in images:
        assert np.array_equal(im[~mask], q.reference.image[~mask])
    assert len({im.tobytes() for im in images}) == 6


def test_loaded_by_name_and_bad_arguments():
    d = load("objects-cir", split="val")
    assert isinstance(d, ObjectsCIR) and d.info()["gallery"] == len(d.gallery_ids())
    with pytest.raises(ShiftbenchError, match="split"):
        ObjectsCIR(split="dev")
    with pytest.raises(ShiftbenchError, match="repeats"):
        ObjectsCIR(repeats=0)
    with pytest.raises(ShiftbenchError, match="not in the val split"):
        d.load_gallery("nope")


def test_plural():
    assert [plural(n) for n in ("goose", "sheep", "mantis", "pickup truck", "ear of corn")] == [
        "geese", "sheep", "mantises", "pickup trucks", "ears of corn"]
