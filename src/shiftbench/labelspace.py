"""Label spaces as explicit objects: what a dataset's labels and a model's outputs mean, and exact maps between them.

A :class:`LabelSpace` is a named, ordered list of class *slots*: slot ``i`` is label value ``i`` in a
dataset (a class index, a mask value, a box label) or output ``i`` of a model (a logit column, a
predicted mask value, a detector label). Each slot has a display name and an identifier; ``id_kind``
says what the identifiers are, so two spaces can be mapped by them exactly:

=================  ==========================================================  ============
constructor        slots                                                       ``id_kind``
=================  ==========================================================  ============
``imagenet1k()``   the 1,000 ImageNet-1k classes in sorted-wnid order          ``wnid``
``coco80()``       the 80 COCO categories, contiguous (0 = person)             ``coco``
``coco91()``       slot = COCO category id (0..90; 0 and 11 gaps unused)       ``coco``
``voc21()``        background + the 20 Pascal VOC classes                       ``name``
``ade150()``       the 150 ADE20K SceneParsing classes                          ``name``
``cityscapes19()`` the 19 Cityscapes train ids (ids: Cityscapes label ids)     ``cityscapes``
``custom(names)``  any list of names (ids: the names)                           ``name``
=================  ==========================================================  ============

An unused slot (a gap in COCO's category ids) has the id ``""`` and the name ``"N/A"``.
:func:`map_spaces` gives, for every slot of a dataset's space, the model slot that means the same
class, when that is exact: the same space, shared identifiers of the same kind, the same unique names,
or a user's ``label_map``. Nothing here is guessed from a class count. This module imports neither
numpy nor torch.

>>> voc = LabelSpace.voc21()
>>> voc.num_classes, voc.index("cat"), voc.name
(21, 8, 'voc21')
>>> coco = LabelSpace.coco91()
>>> coco.num_classes, coco.class_names[17], coco.ids[17], coco.class_names[12]
(91, 'cat', '17', 'N/A')
>>> map_spaces(LabelSpace.custom(["dog", "cat"]), LabelSpace.coco80())  # by unique names
[16, 15]
>>> map_spaces(LabelSpace.coco80(), LabelSpace.coco91())[:3]  # by category ids
[1, 2, 3]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

from .errors import ShiftbenchError

__all__ = ["LabelSpace", "map_spaces", "builtin_spaces", "recognize", "suggest_class", "BUILTIN_NAMES", "UNUSED"]

UNUSED = "N/A"  # display name of an unused slot (COCO's category-id gaps), as in hub detector configs
BUILTIN_NAMES = ("imagenet1k", "coco80", "coco91", "voc21", "ade150", "cityscapes19")


def _data(*parts: str) -> str:
    return resources.files("shiftbench").joinpath("data", *parts).read_text(encoding="utf-8")


def _rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [line.split("\t") for line in lines[1:]]  # first line: the header


@dataclass(frozen=True)
class LabelSpace:
    """An ordered list of class slots: display names, identifiers and what kind of identifiers they are.

    ``name`` identifies the space (``"imagenet1k"``); ``ids`` default to the names (``id_kind="name"``).
    """

    name: str
    class_names: tuple[str, ...]
    ids: tuple[str, ...] | None = None
    id_kind: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "class_names", tuple(str(c) for c in self.class_names))
        if self.ids is None:
            object.__setattr__(self, "ids", tuple("" if c == UNUSED else c for c in self.class_names))
            object.__setattr__(self, "id_kind", self.id_kind or "name")
        else:
            object.__setattr__(self, "ids", tuple(str(i) for i in self.ids))
            object.__setattr__(self, "id_kind", self.id_kind or "id")
        if len(self.ids) != len(self.class_names):
            raise ValueError(f"label space {self.name!r}: {len(self.ids)} ids for {len(self.class_names)} names")

    # -- queries ------------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        """Number of slots (the width of a model's output, the size of a confusion matrix)."""
        return len(self.class_names)

    @property
    def used(self) -> tuple[int, ...]:
        """The slots that hold a class (all but the unused gaps)."""
        return tuple(i for i, x in enumerate(self.ids) if x != "")

    def index(self, class_name: str) -> int:
        """Slot of a class name or id; ShiftbenchError if absent."""
        for table in (self.class_names, self.ids):
            if class_name in table and class_name not in ("", UNUSED):
                return table.index(class_name)
        raise ShiftbenchError(f"class {class_name!r} is not in label space {self.name!r}")

    def resolve(self, key: Any) -> int | None:
        """Slot of a class given as a name, an id or an int slot number; None if it is none of those."""
        if isinstance(key, bool):
            return None
        if isinstance(key, int):
            return key if 0 <= key < self.num_classes and self.ids[key] != "" else None
        key = str(key)
        if key in ("", UNUSED):
            return None
        if key in self.ids:
            return self.ids.index(key)
        if self.class_names.count(key) == 1:
            return self.class_names.index(key)
        return None

    def same_as(self, other: "LabelSpace") -> bool:
        """The same slots with the same ids (display names may differ: CLIP names vs WordNet lemmas)."""
        return (self.num_classes == other.num_classes and self.id_kind == other.id_kind and self.ids == other.ids
                and (self.id_kind != "name" or self.name == other.name or self.class_names == other.class_names))

    def describe(self) -> str:
        """``'imagenet1k' (1000 classes)`` for messages."""
        return f"{self.name!r} ({len(self.used)} classes)"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "num_classes": self.num_classes}

    # -- built-in spaces ----------------------------------------------------------------------------
    @classmethod
    def imagenet1k(cls) -> "LabelSpace":
        """The 1,000 ImageNet-1k classes in the standard (sorted wnid) order, CLIP-style names."""
        return _imagenet1k()

    @classmethod
    def coco80(cls) -> "LabelSpace":
        """The 80 COCO categories in contiguous order (index 0 = person); ids = COCO category ids."""
        return _coco80()

    @classmethod
    def coco91(cls) -> "LabelSpace":
        """COCO's category-id index: slot k = category id k (0..90), gaps unused (DETR-style heads)."""
        return _coco91()

    @classmethod
    def voc21(cls) -> "LabelSpace":
        """Pascal VOC: 0 background, 1..20 the classes (255, the void label, is not a slot)."""
        return _named("voc21", "voc21.txt")

    @classmethod
    def ade150(cls) -> "LabelSpace":
        """The 150 ADE20K SceneParsing classes (label k+1 of the benchmark files is slot k)."""
        return _named("ade150", "ade150.txt")

    @classmethod
    def cityscapes19(cls) -> "LabelSpace":
        """The 19 Cityscapes evaluation classes by train id; ids are the Cityscapes label ids."""
        return _cityscapes19()

    @classmethod
    def custom(cls, names: Iterable[Any], name: str = "custom") -> "LabelSpace":
        """A space of any class names (ids = the names)."""
        names = tuple(str(n) for n in names)
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ShiftbenchError(f"label space {name!r}: class names repeat: {', '.join(dup[:5])}")
        return cls(name, names)

    @classmethod
    def foreground(cls) -> "LabelSpace":
        """Class-agnostic masks: 0 background, 1 foreground (salient object)."""
        return cls("foreground", ("background", "foreground"), id_kind="foreground")

    @classmethod
    def numbered(cls, name: str, num_classes: int) -> "LabelSpace":
        """A space known only by its size (a model config without label names): it maps to nothing
        but itself, so a user must give a ``label_map``."""
        return cls(name, tuple(f"class_{i}" for i in range(num_classes)),
                   tuple(f"{name}:{i}" for i in range(num_classes)), id_kind=f"numbered:{name}")

    @classmethod
    def from_coco_categories(cls, categories: Mapping[int, str], name: str = "coco") -> "LabelSpace":
        """A COCO file's categories, slot = category id. Ids are COCO category ids when every category
        agrees with COCO's own (id, name) pairs; otherwise the names (a custom COCO-format set)."""
        cats = {int(k): str(v) for k, v in categories.items()}
        if not cats:
            raise ShiftbenchError(f"label space {name!r}: no categories")
        if min(cats) < 0:
            raise ShiftbenchError(f"label space {name!r}: negative category id {min(cats)}")
        size = max(cats) + 1
        names = tuple(cats.get(i, UNUSED) for i in range(size))
        standard = dict(zip((int(i) for i in _coco80().ids), _coco80().class_names))
        if all(standard.get(k) == v for k, v in cats.items()):
            ids = tuple(str(i) if i in cats else "" for i in range(size))
            return cls(name, names, ids, id_kind="coco")
        return cls(f"{name}-categories", names, tuple(cats[i] if i in cats else "" for i in range(size)),
                   id_kind="name")


@lru_cache(maxsize=1)
def _imagenet1k() -> LabelSpace:
    rows = _rows(_data("imagenet", "classes.tsv"))
    return LabelSpace("imagenet1k", tuple(r[2] for r in rows), tuple(r[1] for r in rows), id_kind="wnid")


@lru_cache(maxsize=1)
def _coco_table() -> tuple[tuple[int, str], ...]:
    return tuple((int(r[0]), r[1]) for r in _rows(_data("labelspaces", "coco.tsv")))


@lru_cache(maxsize=1)
def _coco80() -> LabelSpace:
    table = _coco_table()
    return LabelSpace("coco80", tuple(n for _, n in table), tuple(str(i) for i, _ in table), id_kind="coco")


@lru_cache(maxsize=1)
def _coco91() -> LabelSpace:
    table = dict(_coco_table())
    return LabelSpace("coco91", tuple(table.get(i, UNUSED) for i in range(91)),
                      tuple(str(i) if i in table else "" for i in range(91)), id_kind="coco")


@lru_cache(maxsize=None)
def _named(name: str, file: str) -> LabelSpace:
    names = [line.strip() for line in _data("labelspaces", file).splitlines() if line.strip()]
    return LabelSpace(name, tuple(names))


@lru_cache(maxsize=1)
def _cityscapes19() -> LabelSpace:
    rows = _rows(_data("labelspaces", "cityscapes19.tsv"))
    return LabelSpace("cityscapes19", tuple(r[2] for r in rows), tuple(r[1] for r in rows), id_kind="cityscapes")


def builtin_spaces() -> dict[str, LabelSpace]:
    """Every built-in space by name."""
    return {"imagenet1k": _imagenet1k(), "coco80": _coco80(), "coco91": _coco91(), "voc21": LabelSpace.voc21(),
            "ade150": LabelSpace.ade150(), "cityscapes19": _cityscapes19()}


def _norm(name: str) -> str:
    return " ".join(str(name).replace("_", " ").lower().split())


@lru_cache(maxsize=1)
def _imagenet_lemmas() -> tuple[str, ...]:
    # hub configs spell ImageNet classes as their WordNet lemma lists ("tench, Tinca tinca")
    return tuple(_norm(r[3]) for r in _rows(_data("imagenet", "classes.tsv")))


def recognize(names: Sequence[str], fallback: str) -> LabelSpace:
    """The built-in space whose class names these are (a hub config's ``id2label``), else a custom space
    named ``fallback``. Names are compared slot by slot (case, spaces and ``_`` ignored); unused slots
    must be unused in both. A class count alone never decides."""
    given = tuple(_norm(n) for n in names)
    for space in builtin_spaces().values():
        if len(given) != space.num_classes:
            continue
        ok = all((g in ("n/a", "") if not space.ids[i] else g == _norm(space.class_names[i]))
                 for i, g in enumerate(given))
        if not ok and space.name == "imagenet1k":  # the WordNet spellings: all lemmas, or the first one
            ok = given in (_imagenet_lemmas(), tuple(_norm(lemmas.split(",")[0]) for lemmas in _imagenet_lemmas()))
        if ok:
            return space
    ids = tuple("" if _norm(n) in ("n/a", "") else str(n) for n in names)
    if len(set(i for i in ids if i)) != len([i for i in ids if i]):
        # repeated names (hub configs sometimes have them): slots are then only known by position
        return LabelSpace(fallback, tuple(names), tuple(f"{fallback}:{i}" if x else "" for i, x in enumerate(ids)),
                          id_kind=f"numbered:{fallback}")
    return LabelSpace(fallback, tuple(str(n) for n in names), ids, id_kind="name")


def map_spaces(dataset: LabelSpace, model: LabelSpace, label_map: Mapping[str, Any] | None = None,
               where: str = "label_map") -> list[int] | None:
    """For every slot of ``dataset``, the ``model`` slot of the same class (-1 for unused slots), or None
    when no exact mapping exists.

    A ``label_map`` (dataset class name/id -> model class name/id/slot) is always read when given, whether
    or not the spaces already match: every entry must name a class on both sides and every used dataset
    class needs an entry (errors name ``where``), and the mapping is the map's, so a deliberate remap
    applies. Without one, tried in order: the same space; identifiers of the same kind (wnids, COCO
    category ids); names that are unique in both spaces. The last two must cover every used dataset slot.
    """
    if label_map:
        return _apply_label_map(dataset, model, label_map, where)
    if dataset.same_as(model):
        return [i if dataset.ids[i] != "" else -1 for i in range(dataset.num_classes)]
    if dataset.id_kind == model.id_kind and not dataset.id_kind.startswith("numbered"):
        index = {x: i for i, x in enumerate(model.ids) if x != ""}
        out = [index.get(x, -2) if x != "" else -1 for x in dataset.ids]
        if -2 not in out:
            return out
    if dataset.id_kind in ("name", "coco", "wnid") and model.id_kind in ("name", "coco", "wnid"):
        # exact names, unique on both sides: "cat" is "cat" whatever the ids
        model_names = [n for i, n in enumerate(model.class_names) if model.ids[i] != ""]
        index = {n: model.class_names.index(n) for n in model_names if model_names.count(n) == 1}
        out = [index.get(dataset.class_names[i], -2) if dataset.ids[i] != "" else -1 for i in range(dataset.num_classes)]
        used = [dataset.class_names[i] for i in dataset.used]
        if -2 not in out and len(set(used)) == len(used):
            return out
    return None


def _apply_label_map(dataset: LabelSpace, model: LabelSpace, label_map: Mapping[str, Any], where: str) -> list[int]:
    """The model slot of every dataset slot as ``label_map`` says; ShiftbenchError naming the first bad entry."""
    out = [-1] * dataset.num_classes
    seen = set()
    for key, value in label_map.items():
        d = dataset.resolve(key)
        if d is None:
            raise ShiftbenchError(f"{where}: {key!r} is not a class of the dataset's label space {dataset.describe()}"
                                  f"{suggest_class(key, dataset)}")
        m = _model_slot(model, value, key, where)
        if m is None:
            raise ShiftbenchError(f"{where}: {key!r} -> {value!r}: {value!r} is not a class of the model's label "
                                  f"space {model.describe()}{suggest_class(value, model)}")
        if d in seen:
            raise ShiftbenchError(f"{where}: {key!r} names dataset class {dataset.class_names[d]!r}, which has "
                                  "an entry already")
        out[d] = m
        seen.add(d)
    missing = [dataset.class_names[i] for i in dataset.used if i not in seen]
    if missing:
        raise ShiftbenchError(f"{where}: no entry for {len(missing)} dataset classes (first: "
                              f"{', '.join(repr(m) for m in missing[:5])})")
    return out


def _model_slot(model: LabelSpace, value: Any, key: Any, where: str) -> int | None:
    """The model slot a label_map entry names: a class name or id, or an output index. An index comes as an int
    from YAML/JSON and as digits from a TSV file (which has no types): digits that are no class name or id of the
    model are the output index, as the YAML int would be. Digits that are both (a COCO category id, a Cityscapes
    label id) stay the id, as before, and a warning names the other reading."""
    m = model.resolve(value)
    if not (isinstance(value, str) and value.isascii() and value.isdigit()):
        return m
    index = model.resolve(int(value))
    if m is None:
        return index
    if index is not None and index != m:
        import logging

        logging.getLogger("shiftbench").warning(
            f"{where}: {key!r} -> {value!r} is read as the model class with id {value!r} (slot {m}, "
            f"{model.class_names[m]!r}), not as output index {value} ({model.class_names[index]!r}); write the index "
            "as a YAML/JSON number, or the class name, to say which")
    return m


def suggest_class(word: Any, space: LabelSpace) -> str:
    """A message's tail: ``(did you mean 'x'?)`` for the class name or id of ``space`` closest to ``word``
    (nothing when none is close); the slot range for an int."""
    import difflib

    if isinstance(word, int) and not isinstance(word, bool):
        return f" (slots: 0..{space.num_classes - 1})"
    names = [n for i, n in enumerate(space.class_names) if space.ids[i] != ""]
    close = difflib.get_close_matches(str(word), names + [x for x in space.ids if x and x not in names], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
