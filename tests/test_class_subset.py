"""The spec's ``class_subset``: a classifier's outputs restricted to some ImageNet classes before every metric,
through ``sb.evaluate`` (compared with a direct computation on the same logits), recorded in the run's identity,
and refused in one line, by the dry run as by the run, where it does not hold the dataset's classes."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.decisions import class_subset
from shiftbench.engine.spec import load_spec
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.labelspace import LabelSpace
from shiftbench.models.base import ZeroShotClassifier
from shiftbench.results.store import Store

IMAGENET = LabelSpace.imagenet1k()
# three classes of ImageNet-R (goldfish, great white shark, hammerhead) and one it lacks (tench)
IN_R = ("n01443537", "n01484850", "n01494475")
TENCH = "n01440764"


def wnid_folder(root: Path, wnids, per_class: int = 4) -> Path:
    """Noise images (different colours per class, so the dummy classifier's logits differ) in wnid folders."""
    rng = np.random.default_rng(0)
    for c, wnid in enumerate(wnids):
        (root / wnid).mkdir(parents=True)
        for i in range(per_class):
            base = rng.integers(0, 256, size=3)
            image = np.clip(rng.normal(base, 30 + 20 * c, size=(40, 48, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(image).save(root / wnid / f"{i}.png")
    return root


def spec(root: Path, subset, **extra) -> dict:
    return {"dataset": str(root), "models": ["dummy_classifier"], "shifts": ["clean"],
            "metrics": ["top1", "top5", "ece"], "class_subset": subset, "log_samples": True, **extra}


def direct_ece(p: np.ndarray, labels: np.ndarray, bins: int = 15) -> float:
    confidence, correct = p.max(axis=1), (p.argmax(axis=1) == labels)
    total = 0.0
    for b in range(bins):
        inside = (confidence > b / bins) & (confidence <= (b + 1) / bins) | ((b == 0) & (confidence == 0))
        if inside.any():
            total += inside.sum() / len(labels) * abs(correct[inside].mean() - confidence[inside].mean())
    return float(total)


@pytest.mark.parametrize("subset", ["imagenet-r", [1, 2, 4, 340, 999]])
def test_evaluate_scores_the_logits_at_the_subsets_columns(tmp_path, subset):
    root = wnid_folder(tmp_path / "data", IN_R[:2] + (IN_R[2],))
    rows = sb.evaluate(spec(root, subset), store=tmp_path / "r.db")
    values = {r["metric"]: r["value"] for r in rows}
    # the same numbers written out: the model's 1,000 logits, kept at the subset's columns (ImageNet order)
    model = sb.create_model("dummy_classifier")
    ds = sb.load_dataset(str(root))
    images = [ds.load(i).image for i in range(len(ds))]
    columns = [IMAGENET.ids.index(w) for w in class_subset(subset).wnids]
    logits = model.predict_logits(images).astype(np.float64)[:, columns]
    labels = np.array([columns.index(ds.load(i).label) for i in range(len(ds))])
    order = np.argsort(-logits, axis=1, kind="stable")
    assert values["top1"] == pytest.approx(np.mean(order[:, 0] == labels))
    assert values["top5"] == pytest.approx(np.mean([labels[i] in order[i, :5] for i in range(len(labels))]))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert values["ece"] == pytest.approx(direct_ece(p, labels), abs=1e-9)
    # the per-sample records are in the subset's space: its slots and its class names
    with Store(tmp_path / "r.db", create=False) as db:
        run = db.run()
        records = {p["sample_id"]: p["prediction"] for p in db.predictions(run["run_id"])}
    assert run["spec"]["class_subset"] == class_subset(subset).as_dict()
    sid = ds.sample_id(0)
    names = class_subset(subset).space().class_names
    assert records[sid]["pred"] == int(order[0, 0]) and records[sid]["pred_name"] == names[order[0, 0]]
    assert records[sid]["label"] == int(labels[0])


def test_the_subset_is_part_of_the_runs_identity(tmp_path):
    root = wnid_folder(tmp_path / "data", IN_R, per_class=2)
    db = tmp_path / "r.db"
    by_name = sb.evaluate(spec(root, "imagenet-r"), store=db)
    indices = [IMAGENET.ids.index(w) for w in class_subset("imagenet-r").wnids]
    by_list = sb.evaluate(spec(root, list(reversed(indices))), store=db)  # the same subset written out: same run
    other = sb.evaluate(spec(root, [1, 2, 4, 5]), store=db)  # another subset: another run
    plain = sb.evaluate(spec(root, None), store=db)  # none: the spec without the key
    assert {r["run_id"] for r in by_name} == {r["run_id"] for r in by_list}
    assert len({by_name[0]["run_id"], other[0]["run_id"], plain[0]["run_id"]}) == 3
    assert "class_subset" not in load_spec(spec(root, None), check_names=False).raw


class ColourZeroShot(ZeroShotClassifier):
    """A zero-shot classifier without weights: images embed as their mean colour, prompts as seeded vectors."""

    name = "colour_zero_shot"

    def __init__(self) -> None:
        self.label_space = IMAGENET

    def encode_images(self, images):
        x = np.stack([np.asarray(im, np.float64).reshape(-1, 3).mean(axis=0) / 255 - 0.5 for im in images])
        x = np.concatenate([x, x ** 2], axis=1)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def encode_texts(self, texts):
        x = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=6) for t in texts])
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_zero_shot_models_take_the_subsets_classes(tmp_path):
    root = wnid_folder(tmp_path / "data", IN_R)
    given = ColourZeroShot()
    rows = sb.evaluate(spec(root, "imagenet-r", metrics=["top1"]), models={"dummy_classifier": given})
    assert given.label_space is IMAGENET  # the caller's object keeps its classes; the run used a copy
    subset = class_subset("imagenet-r")
    direct = ColourZeroShot()
    direct.set_classes(subset.space())  # prompts of the subset's 200 classes, nothing else
    ds = sb.load_dataset(str(root))
    logits = direct.predict_logits([ds.load(i).image for i in range(len(ds))])
    labels = [subset.wnids.index(IMAGENET.ids[ds.load(i).label]) for i in range(len(ds))]
    assert rows[0]["value"] == pytest.approx(np.mean(logits.argmax(axis=1) == labels))


def write_spec(tmp_path: Path, root: Path, subset: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"dataset: {root}\nmodels: [dummy_classifier]\nshifts: [clean]\nmetrics: [top1]\n"
                    f"class_subset: {subset}\n")
    return path


def test_a_subset_without_the_datasets_classes_is_refused_by_the_dry_run_and_the_run(tmp_path, capsys):
    root = wnid_folder(tmp_path / "data", (TENCH,) + IN_R[:2], per_class=1)
    path = write_spec(tmp_path, root, "imagenet-r")
    lines = []
    for args in (["--dry-run"], ["--store", str(tmp_path / "r.db")]):
        assert main(["evaluate", "--config", str(path), *args]) == 2
        lines.append(capsys.readouterr().err.strip().splitlines()[-1])
    expected = (f"error: {path}: class_subset: 1 of the dataset's 3 classes is not in imagenet-r: 'tench' "
                f"({TENCH})")
    assert lines == [expected, expected]
    assert not (tmp_path / "r.db").exists()  # refused before any work: no store left behind
    with pytest.raises(SpecError, match="class_subset: 1 of the dataset's 3 classes is not in imagenet-r"):
        sb.evaluate(spec(root, "imagenet-r"))
    # a limit does not narrow the classes the subset must hold
    with pytest.raises(SpecError, match="not in imagenet-r"):
        sb.evaluate(spec(root, "imagenet-r", limit=1))


@pytest.mark.parametrize("subset, needle", [
    ("imagenet-rr", "class_subset: unknown class list 'imagenet-rr' (did you mean 'imagenet-r'?)"),
    ("[0, 0]", "class_subset[1]: 0 is class n01440764 (tench), listed already at [0]"),
])
def test_bad_subsets_are_refused_with_the_spec_key(tmp_path, capsys, subset, needle):
    root = wnid_folder(tmp_path / "data", IN_R[:1], per_class=1)
    path = write_spec(tmp_path, root, subset)
    assert main(["evaluate", "--config", str(path), "--dry-run"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"error: {path}: {needle}") and "\n" not in line


def test_models_that_cannot_take_a_subset_are_refused(tmp_path):
    root = wnid_folder(tmp_path / "data", ("fish", "shark"), per_class=1)  # class names, no wnids
    custom = spec(root, "imagenet-r", models=[{"name": "dummy_classifier", "params": {"label_space": 10}}],
                  label_map={"fish": 0, "shark": 1})
    with pytest.raises(SpecError, match=r"class_subset: model 'dummy_classifier' predicts .* which lacks 200 of the "
                                        r"classes of imagenet-r"):
        sb.evaluate(custom)
    seg = spec(root, [1, 2], models=["dummy_segmenter"], metrics=["miou"])
    with pytest.raises(ShiftbenchError, match="class_subset: model 'dummy_segmenter' is a segmentation model"):
        sb.evaluate(seg)


def test_results_json_of_a_subset_run(tmp_path, capsys):
    root = wnid_folder(tmp_path / "data", IN_R, per_class=1)
    path = write_spec(tmp_path, root, "imagenet-a")
    missing = [w for w in IN_R if w not in class_subset("imagenet-a").wnids]  # ImageNet-A has other fish
    assert missing
    assert main(["evaluate", "--config", str(path), "--store", str(tmp_path / "a.db"),
                 "--results-json", str(tmp_path / "rows.json")]) == 2
    assert f"{len(missing)} of the dataset's 3 classes" in capsys.readouterr().err
    assert not (tmp_path / "rows.json").exists()
    path.write_text(path.read_text().replace("imagenet-a", "[n01443537, n01484850, n01494475, n01440764]"))
    assert main(["evaluate", "--config", str(path), "--store", str(tmp_path / "a.db"),
                 "--results-json", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["metric"] for r in rows} == {"top1"} and rows[0]["n"] == 3
