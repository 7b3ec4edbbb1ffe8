"""benchmarks/train_augment_example.py: the split is by object, the JSON holds every condition with both heads
and intervals that bracket the gain, and the numbers reproduce (training features, one evaluation cell, heads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import load_benchmark

pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite_pytorch")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    bench = load_benchmark("train_augment_example")
    out = tmp_path_factory.mktemp("train_example") / "result.json"
    returned = bench.main(["--quick", "--json", str(out)])
    return bench, returned, json.loads(out.read_text())


def _object(sample_id: str) -> str:
    return sample_id.split("@", 1)[0]  # "hen_grey@meadow/s0#1" -> "hen_grey"


def test_split_is_by_object_and_classes_are_shared(quick):
    bench, _, saved = quick
    split = saved["split"]
    assert not set(split["train_objects"]) & set(split["eval_objects"])
    train_seen = {_object(i) for i in split["train_ids"]}
    eval_seen = {_object(i) for i in split["eval_ids"]}
    assert train_seen == set(split["train_objects"]) and eval_seen == set(split["eval_objects"])
    assert not train_seen & eval_seen
    from shiftbench.datasets import objects

    def classes(ids):
        return {objects.object_info(o).imagenet_index for o in ids}

    assert classes(train_seen) == classes(eval_seen) == set(split["classes"])  # unseen objects of seen classes
    assert len(split["classes"]) == 11 and len(split["train_objects"]) + len(split["eval_objects"]) == 25
    assert split["train_images"] == len(split["train_ids"]) and split["eval_images"] == len(split["eval_ids"])
    # a different seed draws a different split, still disjoint
    other = bench.split_objects(1)
    assert not set(other["train"]) & set(other["eval"]) and other["classes"] == split["classes"]


def test_every_condition_has_both_heads_and_bracketing_intervals(quick):
    bench, returned, saved = quick
    assert saved["rows"] == json.loads(json.dumps(returned["rows"]))
    assert [r["condition"] for r in saved["rows"]] == [c[0] for c in bench.CONDITIONS]
    assert [f["family"] for f in saved["families"]] == list(bench.FAMILIES)
    n = saved["split"]["eval_images"]
    for r in saved["rows"] + saved["families"]:
        for head in ("baseline", "augmented", "imagenet_head"):
            assert 0.0 <= r[head] <= 1.0, (r.get("condition", r.get("family")), head)
        assert r["n"] == n
        assert r["gain"] == pytest.approx(r["augmented"] - r["baseline"])
        for low, high in (r["ci"], r["ci_objects"]):
            assert low <= r["gain"] + 1e-12 and r["gain"] <= high + 1e-12
    labels = np.array(saved["split"]["eval_labels"].split(), dtype=int)
    assert len(labels) == n and set(labels) <= set(range(len(saved["split"]["classes"])))
    for r in saved["rows"]:  # the per-image predictions rebuild the accuracies
        for head, key in (("baseline", "baseline"), ("augmented", "augmented"), ("imagenet", "imagenet_head")):
            guesses = np.array(saved["predictions"][r["condition"]][head].split(), dtype=int)
            assert len(guesses) == n and np.mean(guesses == labels) == pytest.approx(r[key])
    assert [o["object"] for o in saved["objects"]] == saved["split"]["eval_objects"]
    assert sum(o["images"] for o in saved["objects"]) == n
    assert all(0.0 <= o[k] <= 1.0 for o in saved["objects"] for k in o if k.startswith(("clean_", "shifted_")))
    assert saved["augmentation"]["draws"] == saved["config"]["epochs"] * saved["split"]["train_images"]
    assert sum(saved["augmentation"]["per_shift"].values()) == saved["augmentation"]["draws"]
    assert saved["seconds"]["wall"] > 0


def test_a_second_computation_gives_identical_numbers(quick):
    """Training features, the heads and the clean and motion-blur cells again, in this process: bytes equal."""
    import shiftbench as sb

    bench, _, saved = quick
    config = saved["config"]
    data = bench.prepare(config["seed"], config["train_placements"], config["eval_placements"])
    assert [s.id for s in data["train"]] == saved["split"]["train_ids"]
    model = sb.create_model("efficientnet_lite0")
    x_clean, x_aug, counts = bench.training_features(model, data["train"], config["epochs"], config["seed"])
    assert bench.digest(x_clean) == saved["digests"]["train_clean"]
    assert bench.digest(x_aug) == saved["digests"]["train_augmented"]
    assert dict(sorted(counts.items())) == saved["augmentation"]["per_shift"]
    heads = bench.fit_heads(model, data["split"]["classes"], x_clean, x_aug, data["y_train"])
    for condition in ("clean", "motion_blur s3"):
        x = bench.condition_features(model, data["eval"], condition, config["seed"])
        assert bench.digest(x) == saved["digests"]["eval"][condition]
        for head in ("baseline", "augmented", "imagenet"):
            guesses = bench.int_string(bench.predict(heads[head], x))
            assert guesses == saved["predictions"][condition][head], (condition, head)


def test_object_bootstrap_resamples_whole_objects():
    bench = load_benchmark("train_augment_example")
    assert bench.pp(-0.0001) == "+0.0" and bench.pp(0.0123) == "+1.2" and bench.pp(-0.05) == "-5.0"
    values = np.array([1.0, 1.0, 0.0, 0.0])
    low, high = bench.object_bootstrap(values, ["a", "a", "b", "b"], seed=0)
    assert (low, high) == (0.0, 1.0)  # two objects: the mean is 0, 0.5 or 1, never in between by image
    low, high = bench.object_bootstrap(np.ones(6), list("aabbcc"), seed=0)
    assert low == high == 1.0
