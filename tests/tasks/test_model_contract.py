"""The model contract, over the registry (issue 26, step 3), as tests/shifts/test_shift_contract.py is for shifts: every
registered model is built (tiny, from a config saved to a folder, where it comes from a hub; bundled ones with
their shipped weights) and predicts through the runner: a one-condition spec through ``sb.evaluate`` on a small
generated dataset of its task, scored by the task's default metrics, every row finite with the right n, and every
sample's stored record holding the keys its task object promises. Every task's default metrics are registered
metrics of that task, and every model names a registered task (or is an encoder that metrics take by name).

A newly registered name is picked up here by itself: a named entry is built with no arguments, and a new scheme
fails ``test_every_scheme_has_a_contract_case`` until SCHEME_CASES says how to build a tiny one.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.datasets.base import Dataset
from shiftbench.labelspace import LabelSpace
from shiftbench.metrics.base import check_task
from shiftbench.registry import DATASETS, METRICS, MODELS, TASKS, Entry
from shiftbench.results.store import Store
from shiftbench.sample import Sample
from shiftbench.tasks import task_of

from conftest import make_sample

# models that metrics take by name (caption similarity's sentence encoder, the quality metrics' feature networks):
# no runner evaluates them; the contract builds them and checks what the metrics call
ENCODER_TASKS: dict[str, Callable[[Any], np.ndarray]] = {
    "text_embedding": lambda m: np.asarray(m.encode_texts(["a red car", "a small cat"])),
    "features": lambda m: np.asarray(m.features([make_sample(40, 48, seed=k).image for k in range(2)]).embedding),
}
N = 4  # samples of a generated dataset (queries of the retrieval one: 2)
DATA = "_contract_data"
ZERO_SHOT_CLASSES = ("cat", "dog", "car")
TEMPLATES = ["a photo of a {}."]


def _builtin(entry: Entry) -> bool:
    """Entries shiftbench registers (not a test module's)."""
    target = entry.target
    module = target.partition(":")[0] if isinstance(target, str) else getattr(target, "__module__", "")
    return module.startswith("shiftbench.")


def _named() -> list[str]:
    return [e.name for e in MODELS.entries() if _builtin(e) and not e.name.endswith(":")]


def _schemes() -> list[str]:
    return [e.name[:-1] for e in MODELS.entries() if _builtin(e) and e.name.endswith(":")]


# -- generated data per task ------------------------------------------------------------------------------
class ContractData(Dataset):
    """N samples of 40x48 px for ``task``, labelled in ``space`` (None: plain indices)."""

    name = DATA

    def __init__(self, task: str, space: LabelSpace | None = None, semantic: bool = False):
        self.task, self.space = task, space
        self.annotations = {"classification": ("label",), "segmentation": ("mask",), "detection": ("boxes",),
                            "captioning": ("caption",), "question_answering": ("label",)}[task]
        if task == "segmentation":
            self.mask_space = space if semantic else None
        elif space is not None:
            self.label_space = space

    def __len__(self) -> int:
        return N

    def sample_id(self, index: int) -> str:
        return f"c{index}"

    def load(self, index: int) -> Sample:
        s = make_sample(40, 48, seed=index, sid=self.sample_id(index))
        used = list(self.space.used) if self.space is not None else [0, 1]
        label = int(used[index % min(len(used), 3)])
        if self.task in ("classification", "question_answering"):
            return Sample(image=s.image, label=label, id=s.id)
        if self.task == "segmentation":
            mask = s.mask.astype(np.int64) * (label if getattr(self, "mask_space", None) is not None else 1)
            return Sample(image=s.image, mask=mask, id=s.id)
        if self.task == "detection":
            return Sample(image=s.image, boxes=np.asarray(s.boxes, np.float64), box_labels=np.array([label]), id=s.id)
        return Sample(image=s.image, caption=s.caption, id=s.id)


def _data_for(model: Any) -> ContractData:
    task = model.task
    space = getattr(model, "label_space", None)
    if (task == "classification" and getattr(model, "kind", "") == "zero_shot_classifier") or task == "question_answering":
        space = LabelSpace("contract", ZERO_SHOT_CLASSES)  # the model takes (is asked about) the dataset's classes
    semantic = task == "segmentation" and not getattr(model, "class_agnostic", False)
    return ContractData(task, space if task != "captioning" else None, semantic)


def _through_runner(model: Any, label: str, tmp_path: Path, monkeypatch) -> None:
    """One clean condition of the model's task's default metrics through sb.evaluate, every sample's record kept."""
    task = task_of(model, label)
    assert task.name == model.task and task.runner == "evaluate"
    data = _data_for(model)
    monkeypatch.setitem(DATASETS._entries, DATA, Entry(DATA, lambda: data, "contract data"))
    metrics = list(task.metrics_for(model))
    spec = {"dataset": DATA, "models": [label], "shifts": ["clean"], "metrics": metrics, "batch_size": 3, "seed": 0,
            "log_samples": True}
    rows = sb.evaluate(spec, store=tmp_path / "runs.db", models={label: model})
    _check_rows(rows, metrics, N)
    with Store(tmp_path / "runs.db") as store:
        preds = store.predictions(rows[0]["run_id"])
    assert sorted(p["sample_id"] for p in preds) == [data.sample_id(i) for i in range(N)]
    for p in preds:
        assert task.record_keys <= set(p["prediction"]), (p["sample_id"], sorted(p["prediction"]))
    if callable(getattr(task, "configure", None)):  # a question-answering task is told the prompt and classes first
        task.configure(None, 0, data.label_space)
    direct = task.predict(model, [data.load(i) for i in range(2)])  # the task's prediction, outside the runner
    assert len(direct) == 2


def _check_rows(rows: list[dict], metrics: list[str], n: int) -> None:
    assert rows and {r["extra"].get("metric", r["metric"]) for r in rows} >= set(metrics), rows
    for r in rows:
        if "category" in r["extra"]:  # retrieval's R@K[category]: over the queries of that category
            assert 0 < r["n"] <= n, r
        else:
            assert r["n"] == n, r
        if r["value"] is None:  # stored as NULL only with the reason beside it (COCO's undefined sizes)
            assert r["extra"].get("undefined"), r
        else:
            assert math.isfinite(r["value"]), r


# -- named entries: built with no arguments ----------------------------------------------------------------
@pytest.mark.parametrize("name", _named())
def test_every_named_model_builds_and_predicts_through_the_runner(name, tmp_path, monkeypatch, one_thread):
    meta_task = MODELS.entry(name).meta.get("task")
    model = MODELS.create(name)
    task = getattr(model, "task", None) or meta_task
    assert task == meta_task, f"model {name!r} is registered with task {meta_task!r} but is a {task!r} model"
    if task in ENCODER_TASKS:
        out = ENCODER_TASKS[task](model)
        assert out.ndim == 2 and len(out) == 2 and np.isfinite(out).all()
        return
    if task == "retrieval":
        _retrieve(name, model, tmp_path)
        return
    _through_runner(model, name, tmp_path, monkeypatch)


def _retrieve(name: str, model: Any, tmp_path: Path) -> None:
    from cirr_synth import make_cirr

    make_cirr(tmp_path / "cirr")  # 2 queries over a 7-image gallery
    task = task_of(model, name)
    assert task.runner == "retrieval"
    metrics = list(task.default_metrics)
    spec = {"dataset": str(tmp_path / "cirr"), "models": [name], "shifts": ["clean"], "metrics": metrics, "seed": 0,
            "log_samples": True}
    rows = sb.evaluate(spec, store=tmp_path / "runs.db", models={name: model})
    _check_rows(rows, metrics, 2)
    with Store(tmp_path / "runs.db") as store:
        preds = store.predictions(rows[0]["run_id"])
    assert len(preds) == 2 and all(task.record_keys <= set(p["prediction"]) for p in preds)
    data = sb.load_dataset(str(tmp_path / "cirr"))
    composed = task.predict(model, [data.load(i) for i in range(len(data))])
    assert composed.shape[0] == 2 and np.isfinite(composed).all()


# -- schemes: a tiny model of every kind a scheme creates -----------------------------------------------------
def _hf(save: Callable[[Path], Path], **params: Any) -> Callable[[Path], tuple[str, Any]]:
    def build(tmp_path: Path) -> tuple[str, Any]:
        pytest.importorskip("transformers")
        folder = save(tmp_path / "hub")
        return f"hf:{folder}", sb.create_model(f"hf:{folder}", **params)

    return build


def _tiny_vit(folder: Path) -> Path:
    """A ViT image classifier with a three-class head (32 px input)."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                                 num_attention_heads=4, num_labels=3, id2label=dict(enumerate(ZERO_SHOT_CLASSES)),
                                 label2id={c: i for i, c in enumerate(ZERO_SHOT_CLASSES)})
    transformers.ViTForImageClassification(cfg).save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def _tiny_dinov2(tmp_path: Path) -> tuple[str, Any]:
    pytest.importorskip("transformers")
    import torch
    import transformers

    torch.manual_seed(0)
    folder = tmp_path / "dinov2"
    transformers.Dinov2Model(transformers.Dinov2Config(image_size=28, patch_size=14, hidden_size=32, num_hidden_layers=2,
                                                       num_attention_heads=4, mlp_ratio=2)).save_pretrained(folder)
    return f"dinov2:{folder}", sb.create_model(f"dinov2:{folder}", layers=(1, 2))


def _timm(tmp_path: Path) -> tuple[str, Any]:
    """timm's own tiny test network from its real config (random init), saved as a hub folder."""
    pytest.importorskip("timm")
    import tiny_hub

    folder = tiny_hub.save_tiny_timm(tmp_path / "timm")
    return f"timm:{folder}", sb.create_model(f"timm:{folder}")


def _open_clip(tmp_path: Path) -> tuple[str, Any]:
    """A real open_clip CLIP from a tiny registered config (random init), architecture + weights file."""
    pytest.importorskip("open_clip")
    import tiny_hub

    arch, weights = tiny_hub.save_tiny_open_clip(tmp_path / "clip")
    return f"open_clip:{arch}/{weights}", sb.create_model(f"open_clip:{arch}/{weights}", templates=TEMPLATES)


def _torchvision(tmp_path: Path) -> tuple[str, Any]:
    """torchvision's ResNet-18 (random init) from a local state dict."""
    pytest.importorskip("torchvision")
    import tiny_hub

    path = tiny_hub.save_tiny_torchvision(tmp_path / "resnet18.safetensors")
    return f"torchvision:resnet18/{path}", sb.create_model(f"torchvision:resnet18/{path}")


def _blip2(folder: Path) -> Path:
    import tiny_hub

    return tiny_hub.save_tiny_blip2(folder)


def _tiny(name: str) -> Callable[[Path], Path]:
    def save(folder: Path) -> Path:
        import tiny_hub

        return getattr(tiny_hub, name)(folder)

    return save


SCHEME_CASES: dict[str, dict[str, Callable[[Path], tuple[str, Any]]]] = {
    "hf": {
        "clip": _hf(_tiny("save_tiny_clip"), templates=TEMPLATES),
        "siglip": _hf(_tiny("save_tiny_siglip"), templates=TEMPLATES),
        "vit": _hf(_tiny_vit),
        "detr": _hf(_tiny("save_tiny_detr"), score_threshold=0.0),
        "segformer": _hf(_tiny("save_tiny_segformer")),
        "blip2": _hf(_blip2, max_new_tokens=3),
    },
    "timm": {"test_resnet": _timm},
    "open_clip": {"tiny_clip": _open_clip},
    "torchvision": {"resnet18": _torchvision},
    "dinov2": {"tiny": _tiny_dinov2},
}


def test_every_scheme_has_a_contract_case():
    missing = sorted(set(_schemes()) - set(SCHEME_CASES))
    assert not missing, f"registered model schemes without a tiny contract case: {missing}; add one to SCHEME_CASES"


@pytest.mark.parametrize("scheme, case", [(s, c) for s, cases in SCHEME_CASES.items() for c in cases])
def test_every_scheme_builds_a_tiny_model_that_predicts_through_the_runner(scheme, case, tmp_path, monkeypatch,
                                                                          one_thread):
    label, model = SCHEME_CASES[scheme][case](tmp_path)
    assert label.startswith(f"{scheme}:") and label in MODELS
    task = getattr(model, "task", None) or MODELS.entry(label).meta.get("task")
    if task in ENCODER_TASKS:
        out = ENCODER_TASKS[task](model)
        assert out.ndim == 2 and len(out) == 2 and np.isfinite(out).all()
        return
    _through_runner(model, label, tmp_path, monkeypatch)


# -- tasks and their metrics ------------------------------------------------------------------------------------
def test_every_model_names_a_registered_task():
    for name in _named():
        task = MODELS.entry(name).meta.get("task")
        assert task in TASKS or task in ENCODER_TASKS, f"model {name!r}: task {task!r} is not registered"
    for scheme in _schemes():
        task = MODELS.entry(f"{scheme}:x").meta.get("task")
        assert task is None or task in TASKS or task in ENCODER_TASKS, f"scheme {scheme!r}: task {task!r}"


@pytest.mark.parametrize("name", TASKS.names())
def test_every_tasks_default_metrics_are_registered_metrics_of_that_task(name):
    task = TASKS.create(name)
    assert task.name == name and task.default_metrics and task.record_keys
    model = SimpleNamespace(task=name, name=f"a {name} model", class_agnostic=True)
    for metric in {*task.default_metrics, *task.metrics_for(model)}:
        assert metric in METRICS, f"task {name!r}: default metric {metric!r} is not registered"
        check_task(METRICS.get(metric), model)  # raises unless the metric scores this task


def test_a_model_of_an_unknown_task_is_refused_in_one_line():
    with pytest.raises(sb.ShiftbenchError, match=r"^model 'm': the runner does not evaluate 'features' models yet$"):
        task_of(SimpleNamespace(task="features", name="m"))
    with pytest.raises(sb.ShiftbenchError, match="does not evaluate 'retrieval' models yet"):
        task_of(SimpleNamespace(task="retrieval", name="r"), runner="evaluate")
    assert task_of(SimpleNamespace(task="retrieval", name="r")).runner == "retrieval"


def test_tasks_doctests():
    import doctest

    import shiftbench.tasks

    assert doctest.testmod(shiftbench.tasks).failed == 0
