"""Shifts as training augmentation: worker-invariant seeding, annotations kept, refusals, policy frequencies, HF."""

from __future__ import annotations

import doctest
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError, UnknownNameError
from shiftbench.sample import Sample
from shiftbench.shifts.base import Shift
from shiftbench.training import ShiftPolicy, ShiftTransform, hf_transform

torch = pytest.importorskip("torch")

from shiftbench.training import ShiftDataset, collate  # noqa: E402  (torch is there)

N = 6  # objects: six different cut-outs, one scene each, 64 px
MIXED = ["gaussian_noise", ("background_color", {"color": "colorful"}), "background_texture", "attribute_color",
         "motion_blur", "attribute_style"]
KEEPING = [("background_color", {"color": "red"}), ("background_texture", {"texture": 2}), ("background_scene", {}),
           ("object_only", {}), ("attribute_color", {}), ("attribute_pattern", {}), ("attribute_material", {}),
           ("attribute_style", {}), ("gaussian_noise", {}), ("elastic_transform", {}),
           ("chain", {"shifts": [{"name": "background_color", "params": {"color": "blue"}}, "shot_noise"]})]


@pytest.fixture(scope="module")
def objects():
    from shiftbench.datasets.objects import object_ids

    return sb.load_dataset("objects", size=64, scenes_per_object=1, objects=object_ids()[:N])


@pytest.fixture(scope="module")
def samples(objects):
    return [objects.load(i) for i in range(len(objects))]


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# -- (a) worker invariance -----------------------------------------------------------------------------
def _epochs(dataset, num_workers, persistent=False, shuffle=False, epochs=(0, 1)):
    """{epoch: {index: (image bytes, record)}} through a real DataLoader."""
    # workers are fresh interpreters (spawn), never forks of this threaded test process
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=num_workers, shuffle=shuffle,
                                         persistent_workers=persistent, collate_fn=collate,
                                         multiprocessing_context="spawn" if num_workers else None,
                                         generator=torch.Generator().manual_seed(123))
    seen = {}
    for epoch in epochs:
        dataset.set_epoch(epoch)
        got = {}
        for batch in loader:
            for image, index, record in zip(batch["image"], batch["index"].tolist(), batch["record"]):
                got[index] = (image.numpy().tobytes(), record)  # a dict, kept whole by collate
        seen[epoch] = got
    return seen


def test_dataloader_workers_give_the_same_bytes_for_an_epoch_and_index(objects):
    policy = ShiftPolicy(MIXED, p=0.85)
    ds = ShiftDataset(objects, policy, task="segmentation", seed=7, output="uint8", return_record=True)
    serial = _epochs(ds, 0)
    assert sorted(serial[0]) == list(range(N))
    assert any(r["applied"] for _, r in serial[0].values())
    # two workers (fresh each epoch), shuffled; two persistent workers (they see set_epoch through shared memory)
    assert _epochs(ds, 2, shuffle=True) == serial
    assert _epochs(ds, 2, persistent=True) == serial
    # another epoch is another draw
    changed = [i for i in range(N) if serial[0][i][0] != serial[1][i][0]]
    assert len(changed) >= N - 1
    assert [serial[0][i][1]["shift_seed"] for i in range(N)] != [serial[1][i][1]["shift_seed"] for i in range(N)]


def test_dataset_items_are_the_policy_applied_to_the_sample(objects, samples):
    policy = ShiftPolicy(MIXED, p=1.0)
    ds = ShiftDataset(objects, policy, task="detection", seed=3, output="samples", return_record=True)
    ds.set_epoch(4)
    tensors = ShiftDataset(objects, policy, task="detection", seed=3, epoch=4)
    for i in (0, 5):
        out, record = ds[i]
        direct, direct_record = policy.sample(samples[i], 4, i, seed=3)
        assert record == direct_record and record["epoch"] == 4 and record["index"] == i
        assert np.array_equal(out.image, direct.image)
        item = tensors[i]
        assert item["image"].dtype == torch.float32 and item["image"].shape == (3, 64, 64)
        assert torch.equal((item["image"] * 255).round().to(torch.uint8).permute(1, 2, 0), torch.from_numpy(out.image))
        assert item["mask"].dtype == torch.uint8 and int(item["label"]) == samples[i].label
        assert torch.equal(item["boxes"], torch.from_numpy(samples[i].boxes)) and item["id"] == samples[i].id
    assert ds[-1][1]["index"] == N - 1
    with pytest.raises(IndexError):
        ds[N]


def test_collate_stacks_same_sizes_and_lists_the_rest(samples):
    items = [{"image": torch.zeros(3, 4, 4), "boxes": torch.zeros(1, 4), "label": torch.tensor(1), "index": 0},
             {"image": torch.zeros(3, 4, 5), "boxes": torch.zeros(2, 4), "label": torch.tensor(2), "index": 1}]
    batch = collate(items)
    assert isinstance(batch["image"], list) and isinstance(batch["boxes"], list)
    assert batch["label"].tolist() == [1, 2] and batch["index"].tolist() == [0, 1]
    assert collate(items[:1] * 2)["image"].shape == (2, 3, 4, 4)
    assert collate(samples[:2]) == samples[:2]
    with pytest.raises(ShiftbenchError, match="same annotations"):
        collate([items[0], {"image": torch.zeros(3, 4, 4)}])


# -- (b) annotations stay valid; replay --------------------------------------------------------------------
@pytest.mark.parametrize("name,params", KEEPING, ids=[k[0] for k in KEEPING])
def test_kept_masks_and_boxes_are_unchanged_and_replay_is_exact(samples, name, params):
    policy = ShiftPolicy([(name, params)], p=1.0)
    transform = ShiftTransform(policy, task="segmentation", seed=11)
    ShiftTransform(policy, task="detection")  # the same shifts keep the boxes
    shift = sb.create_shift(name, **params)
    for i in (0, 3):
        sample = samples[i]
        out, record = transform.augment(sample, index=i, epoch=2)
        assert record["applied"] and record["shift"] == name
        assert np.array_equal(out.mask, sample.mask) and np.array_equal(out.boxes, sample.boxes)
        assert out.label == sample.label and out.image.shape == sample.image.shape
        assert not np.array_equal(out.image, sample.image)
        if name.startswith(("background", "object")):
            assert np.array_equal(out.image[sample.mask], sample.image[sample.mask])  # the object, byte for byte
        json.dumps(record)  # a record is plain JSON
        # replay, and the shift applied directly with the recorded params (from a fresh shift object)
        assert np.array_equal(policy.replay(sample, json.loads(json.dumps(record))).image, out.image)
        assert np.array_equal(ShiftPolicy(["brightness"]).replay(sample, record).image, out.image)  # another policy
        assert shift.draw(sample, record["severity"], seed=record["shift_seed"]) == record["params"]
        assert np.array_equal(shift.apply(sample, record["params"]).image, out.image)


def test_dicts_and_tensors_keep_image_mask_and_boxes_together(samples):
    policy = ShiftPolicy([("background_color", {"color": "green"})], p=1.0)
    transform = ShiftTransform(policy, task="detection", seed=5)
    s = samples[2]
    expect = transform(s, index=9).image
    mask, boxes = torch.from_numpy(s.mask), torch.from_numpy(s.boxes)
    row = {"image": torch.from_numpy(s.image).permute(2, 0, 1), "mask": mask, "boxes": boxes, "label": s.label,
           "id": s.id, "extra": "kept"}
    out = transform(row, index=9)
    assert out["image"].dtype == torch.uint8 and torch.equal(out["image"].permute(1, 2, 0), torch.from_numpy(expect))
    assert out["mask"] is mask and out["boxes"] is boxes and out["label"] == s.label and out["extra"] == "kept"
    as_float = transform({**row, "image": row["image"].float() / 255}, index=9)["image"]
    assert as_float.dtype == torch.float32 and torch.equal((as_float * 255).round().to(torch.uint8), out["image"])
    from PIL import Image

    pil = transform({"image": Image.fromarray(s.image), "mask": s.mask, "id": s.id}, index=9)["image"]
    assert isinstance(pil, Image.Image) and np.array_equal(np.asarray(pil), expect)
    # without an index the sample's id keys the draw: a Sample and its dict agree
    assert np.array_equal(transform(s).image, np.asarray(transform({"image": s.image, "mask": s.mask, "id": s.id})["image"]))


# -- (c) refusals ------------------------------------------------------------------------------------------
class _BoxesOnly(Shift):
    name = "boxes_only_test"
    keeps = frozenset({"mask", "boxes"})

    def apply(self, sample, params):
        return sample


@pytest.mark.parametrize("make,task,lacks", [
    (lambda: "background_only", "segmentation", "mask"), (lambda: "background_only", "detection", "boxes"),
    (_BoxesOnly, "classification", "label"),
    (lambda: sb.create_shift("chain", shifts=["gaussian_noise", "background_only"]), "segmentation", "mask"),
], ids=["background_only-segmentation", "background_only-detection", "custom-classification", "chain-segmentation"])
def test_a_shift_that_does_not_keep_what_the_task_needs_is_refused_at_construction(make, task, lacks):
    shift = make()
    policy = ShiftPolicy(["gaussian_noise", shift])
    name = shift if isinstance(shift, str) else shift.name
    with pytest.raises(ShiftbenchError) as exc:
        ShiftTransform(policy, task=task)
    text = _one_line(exc)
    assert f"'{name}'" in text and f"keep the {lacks}" in text and "shifts[1]" in text and task in text
    with pytest.raises(ShiftbenchError, match=f"keep the {lacks}"):
        ShiftDataset([], policy, task=task)
    with pytest.raises(ShiftbenchError, match=f"keep the {lacks}"):
        hf_transform(policy, task=task)


def test_style_edits_keep_the_layout_so_segmentation_accepts_them():
    # attribute_style repaints the whole image but keeps the layout, so Pascal-EA's masks stay valid
    assert "mask" in sb.create_shift("attribute_style").keeps
    ShiftTransform(ShiftPolicy(["attribute_style"]), task="segmentation")


def test_unknown_task_text_shift_and_non_policy_are_refused():
    with pytest.raises(ShiftbenchError, match="unknown task 'depth'.*classification, segmentation, detection"):
        ShiftTransform(ShiftPolicy(["gaussian_noise"]), task="depth")
    with pytest.raises(ShiftbenchError, match="corrupts captions only"):
        ShiftTransform(ShiftPolicy(["text_swap"]), task="classification")
    with pytest.raises(ShiftbenchError, match="takes a ShiftPolicy"):
        ShiftTransform(["gaussian_noise"], task="classification")


def test_unknown_shift_names_say_where_and_suggest():
    with pytest.raises(UnknownNameError) as exc:
        ShiftPolicy(["gaussian_noise", ("gaussian_nosie", {})])
    text = _one_line(exc)
    assert text.startswith("ShiftPolicy shifts[1]: unknown shift 'gaussian_nosie'") and "did you mean 'gaussian_noise'" in text
    with pytest.raises(ShiftbenchError, match=r"shifts\[0\].*unexpected keyword argument 'colour'"):
        ShiftPolicy([("background_color", {"colour": "red"})])


@pytest.mark.parametrize("p", [-0.1, 1.5, True, float("nan"), "0.5", None])
def test_bad_probability_is_refused(p):
    with pytest.raises(ShiftbenchError, match="p is the probability") as exc:
        ShiftPolicy(["gaussian_noise"], p=p)
    _one_line(exc)


@pytest.mark.parametrize("severities,match", [
    ([0], r"shifts\[0\] \(gaussian_noise\): severity 0 is outside 1..5"), (6, "severity 6 is outside 1..5"),
    ("2-7", "severity 6 is outside 1..5"), ("high", "not an int"), ([], "empty"), ([2, 2], "repeat"),
    ([0.5], "outside 1..5"), ([[1], [2], [3]], "one spec for every shift or a list of 2"),
])
def test_bad_severities_are_refused(severities, match):
    with pytest.raises(ShiftbenchError, match=match) as exc:
        ShiftPolicy(["gaussian_noise", "motion_blur"], severities=severities)
    _one_line(exc)
    if "outside" in match:
        assert exc.type is SeverityError


def test_bad_weights_entries_seeds_and_epochs_are_refused():
    for weights, match in (([1], "list of 2"), ([1, -1], "weight must be"), ([0, 0], "sum to 0"),
                           ([1, float("inf")], "weight must be")):
        with pytest.raises(ShiftbenchError, match=match):
            ShiftPolicy(["gaussian_noise", "motion_blur"], weights=weights)
    with pytest.raises(ShiftbenchError, match="unknown key 'sev'"):
        ShiftPolicy([{"name": "gaussian_noise", "sev": 3}])
    with pytest.raises(ShiftbenchError, match="at least one shift"):
        ShiftPolicy([])
    policy = ShiftPolicy(["gaussian_noise"])
    for kw, match in (({"epoch": -1}, "epoch"), ({"index": 1.5}, "index"), ({"seed": -3}, "seed")):
        with pytest.raises(ShiftbenchError, match=match):
            policy.choose(**{"epoch": 0, "index": 0, "seed": 0, **kw})
    with pytest.raises(ShiftbenchError, match="not a ShiftPolicy record"):
        policy.replay(Sample(image=np.zeros((32, 32, 3), np.uint8)), {"shift": "x"})


def test_a_shift_reading_the_mask_is_refused_on_the_first_sample_without_one(samples):
    bare = samples[0].replace(mask=None, id="photo_017")
    # checked whatever is chosen: with p = 0 nothing would be applied, the first call still fails
    transform = ShiftTransform(ShiftPolicy(["gaussian_noise", "background_color"], p=0.0), task="classification")
    with pytest.raises(ShiftbenchError) as exc:
        transform(bare, index=0)
    text = _one_line(exc)
    assert "'background_color'" in text and "'photo_017'" in text and "mask='u2netp'" in text
    with pytest.raises(ShiftbenchError, match="attribute_color.*has none"):
        ShiftTransform(ShiftPolicy(["attribute_color"]), task="classification")(bare)
    with pytest.raises(ShiftbenchError, match=r"'chain'.*its step 'background_texture'.*has none"):  # inside a chain too
        ShiftPolicy([sb.create_shift("chain", shifts=["background_texture", "gaussian_noise"])]).check_sample(bare)
    # told to estimate masks, or reading none: accepted (not run here: u2netp would load)
    ShiftPolicy([("background_color", {"mask": "u2netp"}), "gaussian_noise"]).check_sample(bare)


# -- (d) frequencies --------------------------------------------------------------------------------------
def _within(count: int, n: int, q: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * q) <= sigmas * math.sqrt(n * q * (1 - q)) + 1


def test_choices_follow_p_weights_and_severities():
    policy = ShiftPolicy(["gaussian_noise", {"name": "background_color", "severities": [2, 5], "weight": 2},
                          {"name": "brightness", "severities": "1-3", "weight": 1}], p=0.7)
    n = 6000
    choices = [policy.choose(epoch, i, seed=42) for epoch in (0, 1) for i in range(n // 2)]
    applied = [c for c in choices if c.entry is not None]
    assert _within(len(applied), n, 0.7)
    for k, q in enumerate((0.25, 0.5, 0.25)):
        assert _within(sum(c.entry == k for c in applied), len(applied), q)
    for k in range(3):
        got = [c.severity for c in applied if c.entry == k]
        allowed = policy.entries[k].severities
        for s in allowed:
            assert _within(got.count(s), len(got), 1 / len(allowed))
        assert set(got) == set(allowed)
    # the dice are a function of (seed, epoch, index): any order, another policy object, the same answers
    again = ShiftPolicy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert [again.choose(1, i, seed=42) for i in reversed(range(50))] == choices[n // 2: n // 2 + 50][::-1]
    assert [c.entry for c in choices[:50]] != [policy.choose(0, i, seed=43).entry for i in range(50)]
    assert ShiftPolicy(["clean"], p=0.0).choose(0, 1).entry is None


def test_policy_forms_and_defaults():
    noise = sb.create_shift("gaussian_noise")
    policy = ShiftPolicy([noise, ("background_color", {"color": "blue"}), "clean"], severities=[1, 3],
                         weights=[3, 1, 1])
    assert policy.entries[0].shift is noise and policy.entries[0].severities == (1, 3)
    assert policy.entries[2].severities == (0,)  # one-severity shifts ignore a policy-wide default
    assert [e.weight for e in policy.entries] == [3.0, 1.0, 1.0]
    assert ShiftPolicy("motion_blur").entries[0].severities == (1, 2, 3, 4, 5)
    assert ShiftPolicy(["gaussian_noise", "motion_blur"], severities=[range(1, 3), None]).entries[1].severities == (1, 2, 3, 4, 5)
    assert "background_color(color=blue" in repr(policy) and "@1,3 w=3" in repr(policy)


# -- (e) Hugging Face datasets ---------------------------------------------------------------------------
def test_hf_set_transform_on_a_real_dataset(samples):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rows = samples[:4]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64"),
                                  "mask": datasets.Image(), "id": datasets.Value("string"),
                                  "idx": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict({
        "image": [Image.fromarray(s.image) for s in rows], "label": [s.label for s in rows],
        "mask": [Image.fromarray(s.mask.astype(np.uint8) * 255) for s in rows], "id": [s.id for s in rows],
        "idx": list(range(len(rows)))}, features=features)
    policy = ShiftPolicy([("background_texture", {"texture": 3}), "gaussian_noise", "attribute_pattern"], p=1.0)
    fn = hf_transform(policy, task="segmentation", mask_column="mask", id_column="id", record_column="shift", seed=2)
    ds.set_transform(fn)
    transform = ShiftTransform(policy, task="segmentation", seed=2)
    first = ds[0]
    assert isinstance(first["image"], Image.Image) and first["label"] == rows[0].label
    assert np.array_equal(np.asarray(first["image"]), transform(rows[0]).image)  # keyed by the id column
    assert np.array_equal(np.asarray(first["mask"]) > 0, rows[0].mask)
    assert json.loads(first["shift"])["sample_id"] == rows[0].id
    batch = ds[0:4]  # a batch equals its rows one by one
    assert [np.asarray(im).tobytes() for im in batch["image"]] == [np.asarray(ds[i]["image"]).tobytes() for i in range(4)]
    fn.set_epoch(1)
    assert not np.array_equal(np.asarray(ds[0]["image"]), np.asarray(first["image"]))
    # an int id column keys row i exactly as ShiftDataset keys index i (for the same sample id)
    by_index = hf_transform(policy, task="segmentation", mask_column="mask", id_column="idx", seed=2)
    ds.set_transform(by_index)
    renamed = rows[1].replace(id="1")
    assert np.array_equal(np.asarray(ds[1]["image"]), transform(renamed, index=1).image)
    # no id column: the image's content keys the draw, the same in every call
    ds.set_transform(hf_transform(policy, task="segmentation", mask_column="mask"))
    assert np.asarray(ds[2]["image"]).tobytes() == np.asarray(ds[2]["image"]).tobytes()
    # a mask-reading shift without a mask column: refused at the first row, which it names
    ds.set_transform(hf_transform(policy, task="segmentation", id_column="id"))
    with pytest.raises(ShiftbenchError, match=f"sample '{rows[0].id}' has none"):
        ds[0]
    with pytest.raises(ShiftbenchError, match="no column 'msk'"):
        hf_transform(policy, task="segmentation", mask_column="msk")({"image": []})


# -- the package -------------------------------------------------------------------------------------------
def test_the_package_imports_without_torch_and_its_examples_run():
    code = "import sys, shiftbench.training as t; t.ShiftPolicy(['gaussian_noise']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    import shiftbench.training as training
    import shiftbench.training.policy as policy_module

    assert doctest.testmod(training).failed == 0 and doctest.testmod(policy_module).failed == 0


def test_the_docs_examples_run():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 3
    code = "\n".join(f"exec({b!r}, {{'__name__': '__main__'}})" for b in blocks)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]


def test_return_record_gives_the_record_dict_that_replays_the_item(objects, samples):
    """``return_record=True`` gives the record itself (a dict, as docs/training.md says), not a JSON string: the same
    one ``output="samples"`` gives, plain JSON, replayable, kept whole per item by ``collate``."""
    policy = ShiftPolicy(MIXED, p=1.0)
    tensors = ShiftDataset(objects, policy, task="segmentation", seed=5, output="uint8", return_record=True)
    pairs = ShiftDataset(objects, policy, task="segmentation", seed=5, output="samples", return_record=True)
    for i in (0, 3):
        item = tensors[i]
        shifted, record = pairs[i]
        assert isinstance(item["record"], dict) and item["record"] == record
        assert json.loads(json.dumps(item["record"])) == record
        replayed = policy.replay(samples[i], item["record"]).image
        assert np.array_equal(replayed, item["image"].permute(1, 2, 0).numpy()) and np.array_equal(replayed, shifted.image)
    batch = collate([tensors[0], tensors[1]])
    assert batch["record"] == [tensors[0]["record"], tensors[1]["record"]]


def test_in_between_severities_need_a_dial():
    """A corruption takes 2.5 (a dial); a background replacement takes whole severities only, in one line."""
    policy = ShiftPolicy(["gaussian_noise"], severities=[1.5, 2.5])
    assert policy.entries[0].severities == (1.5, 2.5)
    with pytest.raises(SeverityError, match="background_color.*whole severities") as exc:
        ShiftPolicy([("background_color", {"color": "red"})], severities=[2.5])
    _one_line(exc)
