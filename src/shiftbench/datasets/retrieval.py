"""Composed-image-retrieval readers: CIRR and FashionIQ json layouts, yielding Queries and a gallery.

CIRR (``root`` holds ``captions/`` and ``image_splits/``, directly or under ``cirr/``)::

    captions/cap.rc2.<split>.json      [{"pairid", "reference", "target_hard", "caption", "img_set": {"members"}}]
    image_splits/split.rc2.<split>.json  {"<image name>": "./dev/<image name>.png", ...}

FashionIQ (``root`` holds ``captions/``, ``image_splits/`` and ``images/``)::

    captions/cap.<category>.<split>.json   [{"candidate", "target", "captions": [two texts]}]
    image_splits/split.<category>.<split>.json   ["<image name>", ...]
    images/<image name>.png (or .jpg)

Both resolve every image path inside the dataset root (``..``, absolute paths and symlinks out are refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DatasetError, ShiftbenchError
from ..registry import DATASETS
from ..sample import Query, Sample, decode_image
from .common import (IMAGE_EXTENSIONS, ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, read_json,
                     resolve_inside, screen, shown)

FASHIONIQ_CATEGORIES = ("dress", "shirt", "toptee")


def _read_json(path: Path, kind: str) -> Any:
    if not path.is_file():
        raise ShiftbenchError(f"{kind}: {shown(path)} not found")
    return read_json(path, kind)


def _image_name(value: Any, where: str, what: str, optional: bool = False) -> str | None:
    """An image name of an annotation record: a string (or an integer, written unquoted); None when
    ``optional`` and absent; anything else (a list, an object, a float, true) is one line naming ``where``."""
    if value is None and optional:
        return None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise DatasetError(f"{where}: {what} must be an image name (a string), got {value!r:.60}")


def _texts(value: Any, where: str, what: str) -> list[str]:
    """A list of strings of an annotation record (one string alone is refused: it is not a list)."""
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise DatasetError(f"{where}: {what} must be a list of strings, got {value!r:.60}")
    return value


def _unique_id(value: Any, seen: dict[str, str], where: str) -> str:
    """A query id (an integer or a string) that no earlier query of the split has."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DatasetError(f"{where}: pairid must be an integer or a string, got {value!r:.60}")
    key = str(value)
    if key in seen:
        raise DatasetError(f"{where}: pairid {value!r} repeats that of {seen[key]}; query ids must be unique")
    seen[key] = where
    return key


class _RetrievalReader(ReaderDataset):
    """Queries plus a gallery: ``gallery_ids()`` and ``load_gallery(image_id)`` give the candidate images."""

    annotations = ("query", "target")
    _paths: dict[str, Path]

    def gallery_ids(self) -> list[str]:
        """Every image id of the split (the retrieval gallery), sorted."""
        return sorted(self._paths)

    def load_gallery(self, image_id: str) -> Sample:
        if image_id not in self._paths:
            raise ShiftbenchError(f"{self.name}: image {image_id!r} is not in the {self.split} split")
        path = self._paths[image_id]
        return Sample(image=decode_image(path, shown(path)), id=image_id, meta={"path": str(path)})

    def _screen_queries(self, queries: list[dict[str, Any]], on_error: str, verify: str) -> None:
        checked = {name: path for name, path in self._paths.items()}
        kept, self.skipped = screen(list(checked), lambda name: [checked[name]], self.root, on_error, verify)
        bad = set(checked) - set(kept)
        for name in bad:
            del self._paths[name]
        # a query whose reference or target image is bad goes too, and is reported by its own id
        self._queries = []
        for q in queries:
            missing = [n for n in (q["reference"], q.get("target")) if n in bad]
            if missing:
                self.skipped.append((f"query {q['id']}", f"uses unreadable image {missing[0]}"))
            else:
                self._queries.append(q)

    def __len__(self) -> int:
        return len(self._queries)

    def sample_id(self, index: int) -> str:
        return self._queries[index]["id"]


@DATASETS.register("cirr", description="CIRR composed-retrieval json reader: queries with reference, "
                   "modification text, target and 6-image subset", reader=True, annotations=("query", "target", "subset"))
class Cirr(_RetrievalReader):
    """CIRR queries of one split (``val`` by default; ``test1`` has no targets).

    ``subset_ids`` are the query's ``img_set`` members without the reference image (the Recall_subset
    gallery). ``image_root`` is where the split file's relative paths start (default: ``root``, or
    ``root/img_raw`` when present).
    """

    annotations = ("query", "target", "subset")

    def __init__(self, root: Any = None, split: str = "val", image_root: Any = None, on_error: str = "fail",
                 verify: str = "header"):
        base = check_root(root, "cirr")
        self.split = split
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        meta_dir = base / "cirr" if (base / "cirr" / "captions").is_dir() else base
        if image_root is not None:
            self.root = check_root(base / image_root if not Path(image_root).is_absolute() else image_root, "cirr")
        else:
            self.root = base / "img_raw" if (base / "img_raw").is_dir() else base
        captions_file = meta_dir / "captions" / f"cap.rc2.{split}.json"
        split_file = meta_dir / "image_splits" / f"split.rc2.{split}.json"
        captions, split_map = _read_json(captions_file, "cirr"), _read_json(split_file, "cirr")
        if not isinstance(captions, list) or not isinstance(split_map, dict):
            raise ShiftbenchError("cirr: captions must be a json list and the split file a json object")
        self._paths = {str(name): resolve_inside(self.root, rel, f"cirr: {shown(split_file)}: image {name!r} path")
                       for name, rel in split_map.items()}
        seen: dict[str, str] = {}
        queries = [self._query(entry, i, f"cirr: {shown(captions_file)}: query {i}", seen)
                   for i, entry in enumerate(captions)]
        self._screen_queries(queries, on_error, verify)
        self.description = f"CIRR {split} ({len(self._queries)} queries, {len(self._paths)} images)"

    def _query(self, entry: Any, i: int, where: str, seen: dict[str, str]) -> dict[str, Any]:
        """One caption record as a query, every field checked (type, image names in the split); ``where``
        names the file and the record in each refusal."""
        if not isinstance(entry, dict) or "reference" not in entry or "caption" not in entry:
            raise DatasetError(f"{where}: query without 'reference' and 'caption': {entry!r:.80}")
        query_id = _unique_id(entry.get("pairid", i), seen, where)
        reference = _image_name(entry["reference"], where, "reference")
        target = _image_name(entry.get("target_hard"), where, "target_hard", optional=True)
        if not isinstance(entry["caption"], str):
            raise DatasetError(f"{where}: caption must be a string, got {entry['caption']!r:.60}")
        img_set = entry.get("img_set")
        if img_set is not None and not isinstance(img_set, dict):
            raise DatasetError(f"{where}: img_set must be an object with 'members', got {img_set!r:.60}")
        members = (img_set or {}).get("members")
        if members is not None:
            if not isinstance(members, list):
                raise DatasetError(f"{where}: img_set members must be a list of image names, got {members!r:.60}")
            members = [_image_name(m, where, "img_set member") for m in members]
        for name in [reference] + ([target] if target else []) + list(members or []):
            if name not in self._paths:
                raise DatasetError(f"{where} (pairid {query_id}) names image {name!r}, "
                                   f"which is not in split.rc2.{self.split}.json")
        return {"id": query_id, "reference": reference, "text": entry["caption"], "target": target or None,
                "subset": [m for m in members if m != reference] if members else None}

    @staticmethod
    def detect(path: Path) -> bool:
        path = Path(path)
        return any(any((d / "captions").glob("cap.rc2.*.json")) for d in (path, path / "cirr") if d.is_dir())

    def load(self, index: int) -> Query:
        q = self._queries[index]
        subset = q["subset"]
        if subset is not None and q["target"] is not None and q["target"] not in subset:
            subset = None  # a malformed set that misses its target cannot serve Recall_subset
        return Query(reference=self.load_gallery(q["reference"]), text=q["text"], target_id=q["target"],
                     subset_ids=tuple(subset) if subset is not None else None, id=q["id"],
                     meta={"split": self.split, "dataset": "cirr"})


@DATASETS.register("fashioniq", description="FashionIQ composed-retrieval json reader: queries with "
                   "candidate, two relative captions and target, per category", reader=True,
                   annotations=("query", "target", "category"))
class FashionIQ(_RetrievalReader):
    """FashionIQ queries of one split for the chosen categories (all three by default).

    The query text joins the two relative captions with " and " (the usual evaluation protocol);
    ``meta["captions"]`` keeps both. ``Query.category`` is the garment category.
    """

    annotations = ("query", "target", "category")

    def __init__(self, root: Any = None, split: str = "val", categories: Any = FASHIONIQ_CATEGORIES,
                 on_error: str = "fail", verify: str = "header"):
        self.root = check_root(root, "fashioniq")
        self.split = split
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        categories = [categories] if isinstance(categories, str) else list(categories)
        for c in categories:
            check_choice("category", c, FASHIONIQ_CATEGORIES)
        image_dir = self.root / "images"
        if not image_dir.is_dir():
            raise ShiftbenchError(f"fashioniq: {image_dir} not found")
        present = [c for c in categories if (self.root / "captions" / f"cap.{c}.{split}.json").is_file()]
        if not present:
            raise ShiftbenchError(f"fashioniq: no captions/cap.<category>.{split}.json under {self.root}")
        self.categories = present
        self._paths = {}
        queries = []
        for category in present:
            split_file = self.root / "image_splits" / f"split.{category}.{split}.json"
            captions_file = self.root / "captions" / f"cap.{category}.{split}.json"
            names, captions = _read_json(split_file, "fashioniq"), _read_json(captions_file, "fashioniq")
            if not isinstance(names, list) or not isinstance(captions, list):
                raise ShiftbenchError(f"fashioniq: {category} split and captions files must be json lists")
            for k, name in enumerate(names):
                name = _image_name(name, f"fashioniq: {shown(split_file)}: entry {k}", "the entry")
                self._paths[name] = self._image_path(image_dir, name)
            for i, entry in enumerate(captions):
                queries.append(self._query(entry, f"fashioniq: {shown(captions_file)}: query {i}", category, i))
        self._screen_queries(queries, on_error, verify)
        self.description = f"FashionIQ {split} {'/'.join(present)} ({len(self._queries)} queries)"

    def _query(self, entry: Any, where: str, category: str, i: int) -> dict[str, Any]:
        """One caption record as a query, every field checked; ``where`` names the file and the record."""
        if not isinstance(entry, dict) or "candidate" not in entry or "captions" not in entry:
            raise DatasetError(f"{where}: query without 'candidate' and 'captions': {entry!r:.80}")
        reference = _image_name(entry["candidate"], where, "candidate")
        target = _image_name(entry.get("target"), where, "target", optional=True)
        texts = _texts(entry["captions"], where, "captions")
        for name in [reference] + ([target] if target else []):
            if name not in self._paths:
                raise DatasetError(f"{where} names image {name!r}, which is not in "
                                   f"split.{category}.{self.split}.json")
        return {"id": f"{category}/{self.split}/{i}", "reference": reference, "target": target or None,
                "texts": [t.strip() for t in texts], "category": category}

    @staticmethod
    def _image_path(image_dir: Path, name: str) -> Path:
        for ext in (".png", ".jpg", ".jpeg"):
            path = resolve_inside(image_dir, name + ext, "image name")
            try:
                if path.exists():
                    return path
            except OSError as exc:  # a name too long for the file system
                raise DatasetError(f"fashioniq: image name {name!r:.80} cannot be a file ({exc.strerror})") from None
        if Path(name).suffix.lower() in IMAGE_EXTENSIONS:
            return resolve_inside(image_dir, name, "image name")
        return image_dir / f"{name}.png"  # missing: reported by the image check

    @staticmethod
    def detect(path: Path) -> bool:
        path = Path(path)
        return path.is_dir() and any((path / "captions").glob("cap.*.*.json")) and (path / "images").is_dir() \
            and not any((path / "captions").glob("cap.rc2.*.json"))

    def load(self, index: int) -> Query:
        q = self._queries[index]
        text = " and ".join(t.rstrip(".") for t in q["texts"] if t)
        return Query(reference=self.load_gallery(q["reference"]), text=text, target_id=q["target"], id=q["id"],
                     category=q["category"], meta={"split": self.split, "dataset": "fashioniq",
                                                   "captions": q["texts"]})
