"""Label spaces: built-in class lists, recognition of hub configs, exact mappings, label_map, and the runner's plan."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.tasks.labels import LabelPlan, dataset_label_space, plan_labels
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.labelspace import LabelSpace, builtin_spaces, map_spaces, recognize
from shiftbench.models.base import Detections


def test_builtin_spaces_have_their_published_sizes_and_ids():
    spaces = builtin_spaces()
    assert {k: v.num_classes for k, v in spaces.items()} == {
        "imagenet1k": 1000, "coco80": 80, "coco91": 91, "voc21": 21, "ade150": 150, "cityscapes19": 19}
    inet = spaces["imagenet1k"]
    assert inet.ids[0] == "n01440764" and inet.id_kind == "wnid" and len(set(inet.ids)) == 1000
    assert inet.ids == tuple(sorted(inet.ids))  # model output order is sorted wnids
    coco80, coco91 = spaces["coco80"], spaces["coco91"]
    assert coco80.class_names[0] == "person" and coco80.ids[0] == "1" and coco80.ids[-1] == "90"
    # the 91-slot index: slot = category id; 0 and the 11 unused ids are gaps
    assert len(coco91.used) == 80 and coco91.class_names[0] == "N/A" and coco91.ids[12] == ""
    assert [coco91.class_names[int(i)] for i in coco80.ids] == list(coco80.class_names)
    assert spaces["voc21"].class_names[0] == "background" and spaces["voc21"].index("tvmonitor") == 20
    assert spaces["ade150"].class_names[:3] == ("wall", "building", "sky") and spaces["ade150"].class_names[-1] == "flag"
    city = spaces["cityscapes19"]
    assert city.class_names[0] == "road" and city.ids[0] == "7" and city.ids[-1] == "33" and city.id_kind == "cityscapes"
    for space in spaces.values():  # every used slot is one distinct class
        used = [space.ids[i] for i in space.used]
        assert len(set(used)) == len(used)


def test_label_space_is_importable_from_the_old_places_and_torch_free():
    import subprocess
    import sys

    from shiftbench.models import LabelSpace as A
    from shiftbench.models.base import LabelSpace as B

    assert A is B is LabelSpace
    code = "import sys, shiftbench.labelspace as l; l.LabelSpace.imagenet1k(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_custom_spaces_refuse_repeated_names_and_count_is_not_identity():
    with pytest.raises(ShiftbenchError, match="repeat: a"):
        LabelSpace.custom(["a", "b", "a"])
    folders = LabelSpace.custom([f"cls_{i:04d}" for i in range(1000)])
    assert map_spaces(folders, LabelSpace.imagenet1k()) is None  # 1,000 classes are not ImageNet by count
    assert map_spaces(LabelSpace.numbered("x", 3), LabelSpace.numbered("y", 3)) is None
    assert map_spaces(LabelSpace.numbered("x", 3), LabelSpace.numbered("x", 3)) == [0, 1, 2]


def test_mappings_by_ids_and_by_unique_names():
    inet = LabelSpace.imagenet1k()
    # ids of one kind: a wnid space in another order maps by wnid
    sub = LabelSpace("mine", ("zebra", "tench"), ("n02391049", "n01440764"), id_kind="wnid")
    assert map_spaces(sub, inet) == [340, 0]
    # COCO 80 <-> 91 by category id, both ways
    c80, c91 = LabelSpace.coco80(), LabelSpace.coco91()
    assert map_spaces(c80, c91) == [int(i) for i in c80.ids]
    back = map_spaces(c91, c80)
    assert back[0] == -1 and back[17] == c80.index("cat") and back.count(-1) == 11
    # a COCO file's categories: slot = category id; COCO's own pairs give COCO ids
    file_space = LabelSpace.from_coco_categories({18: "dog", 1: "person"})
    assert file_space.id_kind == "coco" and file_space.num_classes == 19 and file_space.used == (1, 18)
    assert map_spaces(file_space, c80)[18] == c80.index("dog")
    # a custom COCO-format file (its ids are not COCO's) maps by names, never by the numbers
    custom = LabelSpace.from_coco_categories({1: "cat", 2: "dog"})
    assert custom.id_kind == "name" and map_spaces(custom, c91) == [-1, 17, 18]
    assert map_spaces(LabelSpace.custom(["goldfish", "zebra"]), inet) == [1, 340]
    assert map_spaces(LabelSpace.voc21(), LabelSpace.ade150()) is None


def test_label_map_resolves_names_ids_and_indices_and_names_what_is_wrong():
    inet = LabelSpace.imagenet1k()
    data = LabelSpace.custom(["a", "b", "c"])
    assert map_spaces(data, inet, {"a": "n01440764", "b": "zebra", "c": 999}) == [0, 340, 999]
    with pytest.raises(ShiftbenchError, match="no entry for 1 dataset classes .*'c'"):
        map_spaces(data, inet, {"a": 0, "b": 1})
    with pytest.raises(ShiftbenchError, match="'b' -> 'unicorn': 'unicorn' is not a class of the model"):
        map_spaces(data, inet, {"a": 0, "b": "unicorn", "c": 2})
    with pytest.raises(ShiftbenchError, match="'z' is not a class of the dataset"):
        map_spaces(data, inet, {"z": 0})


def test_hub_configs_are_recognised_by_names_not_counts():
    c91 = LabelSpace.coco91()
    assert recognize(list(c91.class_names), "hf:x") is c91
    assert recognize([n.upper() for n in LabelSpace.ade150().class_names], "hf:x").name == "ade150"
    from shiftbench.models.labels import imagenet_classes

    # hub ImageNet heads spell classes as WordNet lemma lists ("tench, Tinca tinca")
    assert recognize([", ".join(r.lemmas) for r in imagenet_classes()], "hf:x").name == "imagenet1k"
    # a user's Dataset that lists the first lemmas ("crane" twice) is ImageNet-1k too, slot by slot
    from shiftbench.datasets.imagenet import class_names as first_lemmas
    from shiftbench.tasks.labels import dataset_label_space

    class Named:
        name, class_names = "mine", first_lemmas()

    assert dataset_label_space(Named()).name == "imagenet1k"
    Named.class_names = Named.class_names[1:] + Named.class_names[:1]  # the same names in another order: not ImageNet
    assert dataset_label_space(Named()).name == "mine-classes"
    other = recognize([f"c{i}" for i in range(1000)], "hf:x")
    assert other.name == "hf:x" and other.id_kind == "name"
    assert recognize(["a", "a"], "hf:y").id_kind.startswith("numbered")  # repeated names: known by position only


def test_spec_label_map_forms(tmp_path):
    from shiftbench.spec import load_spec

    base = {"dataset": "objects", "models": ["dummy_classifier"], "shifts": ["clean"], "metrics": ["top1"]}
    assert load_spec(dict(base, label_map={"a": "zebra", 3: 4})).label_map == {"a": "zebra", "3": 4}
    (tmp_path / "map.tsv").write_text("# folder\twnid\ncls_0\tn01440764\ntabby\ttabby cat\n")
    spec = tmp_path / "spec.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(dict(base, label_map="map.tsv")))
    loaded = load_spec(str(spec))
    assert loaded.label_map == {"cls_0": "n01440764", "tabby": "tabby cat"}
    assert loaded.raw["label_map"] == loaded.label_map  # the content is part of the run identity
    assert "label_map" not in load_spec(base).raw
    (tmp_path / "bad.tsv").write_text("cls_0 n01440764\n")
    with pytest.raises(SpecError, match=r"bad.tsv:1: expected 'dataset_class<TAB>model_class'"):
        load_spec(dict(base, label_map=str(tmp_path / "bad.tsv")))
    with pytest.raises(SpecError, match="label_map: file .*missing.tsv not found"):
        load_spec(dict(base, label_map=str(tmp_path / "missing.tsv")))
    with pytest.raises(SpecError, match="label_map: 'a': expected a model class name, id or index, got True"):
        load_spec(dict(base, label_map={"a": True}))
    with pytest.raises(SpecError, match="label_map: expected a non-empty mapping"):
        load_spec(dict(base, label_map=[1, 2]))


def test_datasets_carry_label_spaces(tmp_path):
    from PIL import Image

    for folder in ("n01440764", "n02391049"):
        (tmp_path / "inet" / folder).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "inet" / folder / "a.png")
    for folder in ("cat", "dog"):
        (tmp_path / "pets" / folder).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "pets" / folder / "a.png")
    inet = sb.load_dataset(str(tmp_path / "inet"))
    assert inet.label_space.name == "imagenet1k" and inet.load(1).label == 340
    pets = sb.load_dataset(str(tmp_path / "pets"), limit=1)  # a Subset keeps the spaces
    assert pets.label_space.class_names == ("cat", "dog") and pets.label_space.id_kind == "name"
    objects = sb.load_dataset("objects", limit=1)
    assert objects.label_space.name == "imagenet1k" and objects.mask_space.name == "foreground"
    assert dataset_label_space(objects, "segmentation").name == "foreground"


class _Data:
    def __init__(self, space=None, mask_space=None, annotations=("label",), class_names=None):
        self.label_space, self.mask_space, self.annotations, self.class_names = space, mask_space, annotations, class_names
        self.name = "d"


def test_plan_refuses_with_one_line_that_says_how_to_map():
    model = sb.create_model("dummy_classifier")  # imagenet1k
    folders = _Data(LabelSpace.custom([f"cls_{i:04d}" for i in range(1000)]))
    with pytest.raises(ShiftbenchError) as err:
        plan_labels(model, folders, dataset_name="dataset 'x'")
    msg = str(err.value)
    assert "\n" not in msg and "label_map:" in msg and "wnids" in msg and "'imagenet1k' (1000 classes)" in msg
    plan = plan_labels(model, folders, {f"cls_{i:04d}": i for i in range(1000)})
    assert plan.to_model is None  # a map onto the same indices is the identity
    plan = plan_labels(model, folders, {f"cls_{i:04d}": 999 - i for i in range(1000)})
    sample = sb.load_dataset("objects", limit=1).load(0).replace(label=3)
    assert plan.targets([sample])[0].label == 996
    with pytest.raises(SpecError, match="model 'dummy_classifier': label_map: no entry"):
        plan_labels(model, folders, {"cls_0000": 0})
    # a dataset with only class names gets a custom space of them (c0..c9 are not ImageNet)
    with pytest.raises(ShiftbenchError, match="label space"):
        plan_labels(model, _Data(class_names=[f"c{i}" for i in range(10)]))


def test_plan_for_segmenters_and_detectors():
    seg = sb.create_model("dummy_segmenter", num_classes=21)  # numbered: maps to nothing but itself
    voc = _Data(LabelSpace.voc21(), LabelSpace.voc21(), annotations=("mask",))
    with pytest.raises(ShiftbenchError, match="no exact mapping"):
        plan_labels(seg, voc)
    agnostic = sb.create_model("dummy_segmenter")
    assert plan_labels(agnostic, voc).to_model is None
    with pytest.raises(ShiftbenchError, match="has no masks"):
        plan_labels(agnostic, _Data(annotations=("label",)))
    with pytest.raises(ShiftbenchError, match="not class maps"):
        plan_labels(seg, _Data(LabelSpace.coco80(), None, annotations=("boxes", "mask")))
    # mask values move into the model's space; void stays void; a value outside the space is named
    plan = LabelPlan(seg, "segmentation", [2, 0, 1], 3)
    from shiftbench.sample import Sample

    mask = np.array([[0, 1], [2, 255]], np.uint8)
    s = Sample(image=np.zeros((2, 2, 3), np.uint8), mask=mask, id="s")
    assert plan.targets([s])[0].mask.tolist() == [[2, 0], [1, 255]]
    with pytest.raises(ShiftbenchError, match="sample 's': mask value 7 is not a class"):
        plan.targets([s.replace(mask=np.array([[7, 0], [0, 0]], np.uint8))])
    # detections come back in the dataset's ids: a COCO file of two categories, a coco91 head
    det = type("Det", (), {"task": "detection", "name": "det", "label_space": LabelSpace.coco91()})()
    data = _Data(LabelSpace.from_coco_categories({1: "person", 18: "dog"}), annotations=("boxes",))
    plan = plan_labels(det, data)
    assert plan.output_space is data.label_space  # detections are named from the dataset's categories
    out = plan.outputs([Detections(np.zeros((3, 4)), [0.9, 0.8, 0.7], [18, 17, 1])])[0]
    assert out.labels.tolist() == [18, 1] and out.scores.tolist() == pytest.approx([0.9, 0.7])  # cat (17) is not in the file
    det80 = type("Det", (), {"task": "detection", "name": "det", "label_space": LabelSpace.coco80()})()
    out = plan_labels(det80, data).outputs([Detections(np.zeros((2, 4)), [0.9, 0.8], [16, 0])])[0]
    assert out.labels.tolist() == [18, 1]  # contiguous index 16 is dog = category 18


def test_zero_shot_models_adopt_the_dataset_space_on_a_copy(tmp_path):
    pytest.importorskip("open_clip")
    from tiny_hub import save_tiny_open_clip

    _, weights = save_tiny_open_clip(tmp_path / "clip")  # a real open_clip CLIP, random init, from a local folder
    model = sb.create_model(f"open_clip:{weights.parent}")
    before = (model.label_space, model.templates, model._class_features)
    pets = _Data(LabelSpace.custom(["cat", "dog"]))
    plan = plan_labels(model, pets)
    assert plan.model is not model and plan.model.label_space.class_names == ("cat", "dog")
    assert plan.model.predict_logits([np.zeros((20, 20, 3), np.uint8)]).shape == (1, 2)
    assert (model.label_space, model.templates, model._class_features) == before  # caller's object untouched
    same = plan_labels(model, _Data(LabelSpace.imagenet1k()))
    assert same.model is model and same.to_model is None


def test_a_tsv_label_map_takes_output_indices_as_the_yaml_form_does(tmp_path, caplog):
    """A TSV file has no types: digits that name no class of the model are its output index, as a YAML int is;
    digits that are also a class id stay the id (as before) and a warning names the other reading."""
    from shiftbench.spec import load_spec

    base = {"dataset": "objects", "models": ["dummy_classifier"], "shifts": ["clean"], "metrics": ["top1"]}
    (tmp_path / "map.tsv").write_text("a\t0\nb\tzebra\nc\t999\n")
    tsv = load_spec(dict(base, label_map=str(tmp_path / "map.tsv"))).label_map
    yml = load_spec(dict(base, label_map={"a": 0, "b": "zebra", "c": 999})).label_map
    inet, data = LabelSpace.imagenet1k(), LabelSpace.custom(["a", "b", "c"])
    assert map_spaces(data, inet, tsv) == map_spaces(data, inet, yml) == [0, 340, 999]
    with pytest.raises(ShiftbenchError, match="'c' -> '1000': '1000' is not a class of the model"):
        map_spaces(data, inet, {**tsv, "c": "1000"})  # out of range is still refused, naming the entry
    # COCO-80: "17" is the category id of 'cat' (slot 15) and also output index 17: the id, as before, said once
    c80, one = LabelSpace.coco80(), LabelSpace.custom(["x"])
    with caplog.at_level("WARNING", logger="shiftbench"):
        assert map_spaces(one, c80, {"x": "17"}) == [c80.index("cat")]
    assert [r.getMessage() for r in caplog.records] == [
        "label_map: 'x' -> '17' is read as the model class with id '17' (slot 15, 'cat'), not as output index 17 "
        f"({c80.class_names[17]!r}); write the index as a YAML/JSON number, or the class name, to say which"]
    assert map_spaces(one, c80, {"x": 17}) == [17]  # the YAML/JSON number is the index
