"""Selections that never count a sample twice, over generated inputs: an ``ids:`` file listing a sample twice,
two samples of a dataset sharing an id, two spec entries planning the same condition, and a ``label_map``
that is always read (its typos refused in one line naming the entry, its remaps applied to the scored
labels), whether or not the label spaces already match."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from PIL import Image

import tiny_registry  # noqa: F401 - registers _test_tiny (a dataset without a label space)
from shiftbench.datasets.base import Dataset
from shiftbench.engine.evaluate import evaluate, prepare
from shiftbench.tasks.labels import plan_labels
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.registry import DATASETS, MODELS
from shiftbench.sample import Sample
from shiftbench.spec import load_spec

from conftest import make_image

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CLASSES = ("cat", "dog", "fox")
IDS = [f"{c}/{i}.png" for c in CLASSES for i in range(2)]  # the folder's sample ids, in its order
MODEL = {"name": "dummy_classifier", "params": {"label_space": list(CLASSES)}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("selections") / "data"
    for k, sid in enumerate(IDS):
        (root / sid).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(make_image(32, 32, seed=k)).save(root / sid)
    return root


def base(root: Path, **extra) -> dict:
    return {"dataset": str(root), "models": [MODEL], "shifts": ["clean"], "metrics": ["top1"], "batch_size": 4, **extra}


def one_line(fn) -> str | None:
    try:
        fn()
    except ShiftbenchError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return None


# -- ids files ------------------------------------------------------------------------------------------
_counter = itertools.count()
ID_LINES = st.lists(st.one_of(st.sampled_from(IDS), st.sampled_from(["", "# a comment"])), min_size=1, max_size=8)


@SETTINGS
@given(lines=ID_LINES)
def test_an_id_listed_twice_is_refused_with_both_lines(folder, tmp_path, lines):
    path = tmp_path / f"ids{next(_counter)}.txt"
    path.write_text("\n".join(lines) + "\n")
    seen: dict[str, int] = {}
    repeat = None
    for n, line in enumerate(lines, start=1):
        if line in IDS:
            if line in seen:
                repeat = (line, seen[line], n)
                break
            seen[line] = n
    spec = base(folder, ids=str(path))
    event("repeated id" if repeat else "no id" if not seen else "distinct ids")
    if not seen and repeat is None:  # nothing listed: the run has no samples
        assert "no samples" in one_line(lambda: prepare(spec))
        return
    if repeat is not None:
        sid, a, b = repeat
        expected = f"{path}:{b}: id {sid!r} is listed twice (lines {a} and {b}); list each sample once"
        assert one_line(lambda: prepare(spec)) == expected
        assert one_line(lambda: evaluate(spec, store=tmp_path / "never.db")) == expected
        assert not (tmp_path / "never.db").exists()
        return
    rows = evaluate(spec)
    assert {r["n"] for r in rows} == {len(seen)}  # each listed sample once


class _Named(Dataset):
    """Samples whose ids are given (repeats allowed), labels 0/1; ``cheap``: ids without decoding."""

    name = "_test_named_ids"
    annotations = ("label",)

    def __init__(self, ids: list[str], cheap: bool = True):
        self.ids, self.cheap = list(ids), cheap
        self.decoded = 0

    def __len__(self) -> int:
        return len(self.ids)

    def load(self, index: int) -> Sample:
        self.decoded += 1
        return Sample(image=make_image(32, 32, seed=index), label=index % 2, id=self.ids[index])


class _CheapNamed(_Named):
    def sample_id(self, index: int) -> str:
        return self.ids[index]


def _make_named(ids: list[str], cheap: bool = True) -> _Named:
    return (_CheapNamed if cheap else _Named)(ids, cheap)


if "_test_named_ids" not in DATASETS:
    DATASETS.add("_test_named_ids", _make_named, description="test dataset with given ids", size=0)


@SETTINGS
@given(ids=st.lists(st.sampled_from("abcd"), min_size=1, max_size=7), cheap=st.booleans(),
       limit=st.one_of(st.none(), st.integers(1, 7)))
def test_samples_sharing_an_id_are_refused_before_any_work(tmp_path, ids, cheap, limit):
    spec = {"dataset": "_test_named_ids", "dataset_params": {"ids": ids, "cheap": cheap}, "shifts": ["clean"],
            "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}], "metrics": ["top1"], "limit": limit}
    # cheap ids are checked over the whole dataset; ids that need a decode only over the samples the run reads
    checked = ids if cheap or limit is None else ids[:limit]
    first_repeat = next((i for i, x in enumerate(checked) if x in checked[:i]), None)
    store = tmp_path / f"s{next(_counter)}.db"
    event(f"cheap={cheap}, {'shared id' if first_repeat is not None else 'unique ids'}")
    msg = one_line(lambda: evaluate(spec, store=store))
    if first_repeat is None:
        assert msg is None
        return
    sid = checked[first_repeat]
    assert msg == (f"dataset '_test_named_ids': samples {checked.index(sid)} and {first_repeat} have the same id "
                   f"{sid!r}; ids must be unique (each names a sample's records and random stream)")
    assert not store.exists()  # refused before the store was opened


# -- repeated shift entries -----------------------------------------------------------------------------
ENTRY = st.one_of(
    st.just("clean"),
    st.tuples(st.sampled_from(["gaussian_noise", "fog"]),
              st.one_of(st.none(), st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True))),
    st.tuples(st.just("background_color"), st.sampled_from([None, "red", "blue"]),
              st.one_of(st.none(), st.lists(st.integers(1, 5), min_size=1, max_size=2, unique=True))),
)


def _entry(e) -> object:
    if e == "clean":
        return "clean"
    name, x, *sev = e
    if name == "background_color":
        entry = {"name": name, **({"params": {"color": x}} if x else {}), **({"severities": sev[0]} if sev[0] else {})}
        return entry if len(entry) > 1 else name
    return name if x is None else {"name": name, "severities": x}


def _conditions(e) -> set:
    """What an entry plans: (name, params, severity) triples (a bare name: the shift's default severity where
    it declares one, as backgrounds do (5), else all severities)."""
    if e == "clean":
        return {("clean", "", 0)}
    name, x, *sev = e
    if name == "background_color":  # bare: severity 5 (so a bare entry and one at [3] plan different conditions)
        return {(name, x or "", s) for s in (sev[0] or [5])}
    return {(name, "", s) for s in (x or range(1, 6))}


@SETTINGS
@given(entries=st.lists(ENTRY, min_size=1, max_size=5))
def test_a_condition_planned_twice_is_refused_naming_both_entries(entries):
    spec = {"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"],
            "shifts": [_entry(e) for e in entries]}
    repeat = next(((j, i) for j in range(len(entries)) for i in range(j)
                   if _conditions(entries[i]) & _conditions(entries[j])), None)
    event("repeated" if repeat else "distinct")
    for check_names in (True, False):
        if repeat is None:
            planned = load_spec(spec).conditions()
            assert len(planned) == len(set().union(*map(_conditions, entries)) | {("clean", "", 0)})
            break
        with pytest.raises(SpecError) as err:
            load_spec(spec, check_names=check_names)
        j, i = repeat
        assert str(err.value).startswith(f"shifts[{j}]: repeats shifts[{i}] (")
        assert str(err.value).endswith("list each shift, params and severity once")


def test_evaluate_and_the_dry_run_agree_on_a_repeated_entry(folder, tmp_path):
    spec = base(folder, shifts=[{"name": "fog", "severities": [1, 2]}, "clean", {"name": "fog", "severities": [2]}],
                limit=2)
    config = tmp_path / "spec.yaml"
    import yaml

    config.write_text(yaml.safe_dump(spec))
    dry = one_line(lambda: prepare(str(config)))
    real = one_line(lambda: evaluate(str(config)))
    assert dry == real == f"{config}: shifts[2]: repeats shifts[0] ('fog', severity 2); list each shift, params and " \
                          "severity once"
    rows = evaluate(dict(spec, shifts=[{"name": "fog", "severities": [1, 2]}, "clean"]))
    assert sorted((r["shift"], r["severity"]) for r in rows) == [("clean", 0), ("fog", 1), ("fog", 2)]


# -- label maps -----------------------------------------------------------------------------------------
@st.composite
def label_maps(draw) -> dict:
    """A map of every class to a model class (a name or an output index; many-to-one allowed), then perhaps
    spoilt: an entry dropped, a key or a value that is no class, and the entries in any order."""
    targets = draw(st.lists(st.one_of(st.sampled_from(CLASSES), st.integers(0, 2)), min_size=3, max_size=3))
    out = dict(zip(CLASSES, targets))
    spoil = draw(st.sampled_from(["none", "none", "drop", "bad key", "bad value"]))
    if spoil == "drop":
        del out[draw(st.sampled_from(CLASSES))]
    elif spoil == "bad key":
        out[draw(st.sampled_from(["caat", "Dog", "fox "]))] = draw(st.sampled_from(CLASSES))
    elif spoil == "bad value":
        out[draw(st.sampled_from(CLASSES))] = draw(st.sampled_from(["dgo", "wolf", -1, 3, 4]))
    order = draw(st.permutations(list(out)))
    return {k: out[k] for k in order}


def _expected(label_map: dict) -> tuple[str | None, list[int] | None]:
    """The oracle: the first bad entry's text (a piece of the message), or the dataset slot -> model slot list."""
    out = [-1] * len(CLASSES)
    for key, value in label_map.items():
        if key not in CLASSES:
            return f"label_map: {key!r} is not a class of the dataset's label space", None
        index = value if isinstance(value, int) and 0 <= value < 3 else None
        slot = CLASSES.index(value) if value in CLASSES else index
        if slot is None:
            return f"label_map: {key!r} -> {value!r}: {value!r} is not a class of the model's label space", None
        out[CLASSES.index(key)] = slot
    if -1 in out:
        return "label_map: no entry for", None
    return None, out


class _Folder:
    """What plan_labels reads of the folder reader: the label space of its class folders."""

    def __init__(self, root: Path):
        import shiftbench as sb

        self.label_space = sb.load_dataset(str(root)).label_space
        self.annotations = ("label",)
        self.name = "folder"


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(label_map=label_maps())
def test_a_label_map_is_read_even_when_the_spaces_match(folder, label_map):
    model = MODELS.create(MODEL["name"], **MODEL["params"])
    data = _Folder(folder)
    assert data.label_space.same_as(model.label_space)  # the spaces match: the map used to be ignored
    problem, mapping = _expected(label_map)
    event("valid" if problem is None else "no entry" if "no entry" in problem else "bad key" if "->" not in problem
          else "bad value")
    if problem is not None:
        with pytest.raises(SpecError) as err:
            plan_labels(model, data, label_map)
        assert str(err.value).startswith(f"model 'dummy_classifier': {problem}") and "\n" not in str(err.value)
        return
    plan = plan_labels(model, data, label_map)
    labels = [s.label for s in plan.targets([Sample(image=make_image(8, 8), label=d, id=str(d)) for d in range(3)])]
    assert labels == mapping


@SETTINGS
@given(perm=st.permutations(range(3)))
def test_a_remap_moves_the_scored_labels(folder, tmp_path, perm):
    label_map = {c: CLASSES[p] for c, p in zip(CLASSES, perm)}
    store = tmp_path / f"m{next(_counter)}.db"
    rows = evaluate(base(folder, label_map=label_map, log_samples=True), store=store)
    from shiftbench.results.store import Store

    with Store(store, create=False) as db:
        records = {p["sample_id"]: p["prediction"] for p in db.predictions(rows[0]["run_id"])}
    assert sorted(records) == sorted(IDS)
    for sid, record in records.items():
        assert record["label"] == perm[CLASSES.index(sid.split("/")[0])]
        assert record["correct"] == (record["pred"] == record["label"])
    top1 = sum(r["correct"] for r in records.values()) / len(records)
    assert rows[0]["value"] == pytest.approx(top1)


def test_label_map_typos_stop_the_dry_run_too(folder):
    spec = base(folder, label_map={"cat": "cat", "dog": "dgo", "fox": "fox"})
    dry = one_line(lambda: prepare(spec))
    assert dry == one_line(lambda: evaluate(spec))
    assert dry == ("model 'dummy_classifier': label_map: 'dog' -> 'dgo': 'dgo' is not a class of the model's label "
                   "space 'custom3' (3 classes) (did you mean 'dog'?)")
    # a dataset that declares no label space cannot have its classes mapped: said rather than ignored
    msg = one_line(lambda: prepare({"dataset": "_test_tiny", "models": [{"name": "dummy_classifier",
                                    "params": {"label_space": 2}}], "shifts": ["clean"], "metrics": ["top1"],
                                    "label_map": {"a": 0}}))
    assert "label_map" in msg and "declares no label space" in msg


def test_a_label_map_no_model_uses_is_said_not_ignored(folder):
    """A captioner has no classes to map: the map's dataset classes are still checked, and a map that no model
    of the spec applies is refused rather than silently dropped."""
    spec = base(folder, models=["dummy_captioner"], metrics=["text_similarity"])
    msg = one_line(lambda: prepare(dict(spec, label_map={"caat": "cat"})))
    assert msg == ("model 'dummy_captioner': label_map: 'caat' is not a class of the dataset's label space "
                   f"'folders:{folder.name}' (3 classes) (did you mean 'cat'?)")
    msg = one_line(lambda: prepare(dict(spec, label_map={"cat": "cat", "dog": "dog", "fox": "fox"})))
    assert msg.startswith("label_map: no model of this spec maps dataset classes to its own")
