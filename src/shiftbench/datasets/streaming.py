"""What the streaming readers (webdataset tar shards, Parquet / Arrow tables) share: images decoded from
bytes, the bad-record policy for records that are not files, and label spaces built from label values.

A record of a shard or a table has no file of its own, so the corrupt-image policy of
:mod:`shiftbench.datasets.common` is applied to records named ``<shard>:<key>`` or ``<file> row <n>``:
``on_error="fail"`` raises :class:`~shiftbench.datasets.common.BadImagesError` naming every bad record,
``"skip"`` leaves them out, logs one line and lists them in ``dataset.skipped``.

Labels come as integers or strings. :class:`LabelCoder` turns them into label values and a
:class:`~shiftbench.labelspace.LabelSpace`, never guessing from a class count:

- with class names (a classes file, a ``ClassLabel`` feature, or ``classes=``): an integer is a position in
  that list, a string one of its names; when every name is an ImageNet-1k wnid the space is ImageNet-1k
  and values are ImageNet indices (as the image-folder reader does for wnid folders);
- without: strings that are all ImageNet-1k wnids give ImageNet-1k, other strings a custom space of the
  sorted distinct names; integers a numbered space (it maps to no model's classes without a ``label_map``)
  sized by the largest label. A negative label, or one of ``MAX_NUMBERED`` or more, is a bad record: a
  space of a billion slots is a typo, not a dataset.

>>> coder = LabelCoder.build(["n02391049", "n01440764"], classes=None, name="shards")
>>> coder.space.name, coder.code("n02391049")
('imagenet1k', 340)
>>> coder = LabelCoder.build(["cat", "dog", "cat"], classes=None, name="shards")
>>> coder.space.class_names, coder.code("dog")
(('cat', 'dog'), 1)
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import ImageError, ShiftbenchError
from ..labelspace import LabelSpace, recognize
from ..sample import decode_image, image_error_reason
from .common import BadImagesError, log, one_line, parse_json, shown, skipped_line
from .imagenet import class_names as imagenet_class_names, imagenet_classes, wnid_to_index

__all__ = ["decode_image_bytes", "check_image_bytes", "LabelCoder", "read_classes_file", "report_bad"]
MAX_NUMBERED = 1 << 20  # integer labels without class names: at most this many slots


def decode_image_bytes(data: bytes, source: str) -> np.ndarray:
    """Image bytes as HxWx3 uint8 RGB (EXIF orientation applied), exactly as ``load_image`` reads a file;
    any decoder error becomes one :class:`ImageError` naming ``source``."""
    return decode_image(io.BytesIO(data), source)


def check_image_bytes(data: bytes | None, verify: str) -> str | None:
    """Why ``data`` is not a usable image (None if it is): ``"header"`` opens it, ``"full"`` decodes it."""
    if data is None:
        return "no image bytes"
    if verify == "none":
        return None
    if verify == "full":
        try:
            decode_image_bytes(data, "")
        except ImageError as exc:
            return str(exc).removeprefix(": ")
        return None
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)):
            pass
    except Exception as exc:  # noqa: BLE001 - every decoder error is a reason, never a traceback
        return image_error_reason(exc)
    return None


def report_bad(bad: Sequence[tuple[str, str]], root: Path, on_error: str) -> None:
    """Apply the policy to the bad records found while indexing: raise (fail) or log one line (skip)."""
    if bad and on_error == "fail":
        raise BadImagesError(bad, root)
    if bad:
        log.warning(skipped_line(bad, root))


def read_classes_file(path: Path) -> list[str]:
    """Class names from ``classes.txt`` (one a line, surrounding spaces dropped) or ``classes.json`` (a list,
    or {index: name}: names exactly as written, any character allowed); a name listed twice is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShiftbenchError(f"{shown(path)}: cannot read the class names ({one_line(exc)})") from None
    if path.suffix == ".json":
        data = parse_json(text, shown(path))
        if isinstance(data, dict):
            try:
                items = sorted((int(k), v) for k, v in data.items())
            except ValueError:
                raise ShiftbenchError(f"{path}: keys must be class indices 0..K-1") from None
            if [k for k, _ in items] != list(range(len(items))):
                raise ShiftbenchError(f"{path}: keys must be the class indices 0..{len(items) - 1} without gaps")
            data = [v for _, v in items]
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise ShiftbenchError(f"{shown(path)}: expected a list of class names (strings)")
        names = data
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        raise ShiftbenchError(f"{shown(path)}: no class names")
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise ShiftbenchError(f"{shown(path)}: class {name!r} is listed twice (classes {first[name]} and {i})")
        first[name] = i
    return names


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclass(frozen=True)
class LabelCoder:
    """Maps raw label values (ints or strings) to label values of ``space``; ``source`` says how it was built."""

    space: LabelSpace
    source: str  # "classes" (names given), "imagenet" (wnids), "names" (distinct strings), "numbered"
    _by_int: tuple[int, ...] | None  # an integer label -> label value (None: integers are not labels here)
    _by_name: dict[str, int]

    @classmethod
    def build(cls, values: Iterable[Any], classes: Sequence[str] | None, name: str) -> "LabelCoder":
        """The coder for these raw values (None values are ignored: they are bad records)."""
        values = [v for v in values if v is not None]
        wnids = wnid_to_index()
        if classes is not None:
            classes = [str(c) for c in classes]
            if not classes:
                raise ShiftbenchError(f"{name}: the class list is empty")
            if all(c in wnids for c in classes):
                return cls(LabelSpace.imagenet1k(), "imagenet", tuple(wnids[c] for c in classes),
                           {c: wnids[c] for c in classes})
            # names of a built-in space (a hub ClassLabel spells ImageNet as "tench, Tinca tinca") are that
            # space, slot for slot; other names are their own space
            space = recognize(classes, fallback=name)
            source = "imagenet" if space.name == "imagenet1k" else "classes"
            by_name = {c: i for i, c in enumerate(classes) if classes.count(c) == 1}
            return cls(space, source, tuple(range(len(classes))), by_name)
        ints = [v for v in values if _is_int(v)]
        strings = sorted({str(v) for v in values if not _is_int(v)})
        if ints and strings:
            raise ShiftbenchError(f"{name}: labels mix integers ({ints[0]}) and names ({strings[0]!r}); "
                                  "give the class names (classes=) so both can be read")
        if strings:
            if all(s in wnids for s in strings):
                return cls(LabelSpace.imagenet1k(), "imagenet", None, {s: wnids[s] for s in strings})
            return cls(LabelSpace.custom(strings, name=name), "names", None, {s: i for i, s in enumerate(strings)})
        # out-of-range integers are left to code(), which names their records
        size = max((int(v) for v in ints if 0 <= int(v) < MAX_NUMBERED), default=-1) + 1
        return cls(LabelSpace.numbered(name, size), "numbered", tuple(range(size)), {})

    def code(self, value: Any) -> int:
        """The label value of a raw value; ValueError with the reason when it is not a class of the space."""
        if _is_int(value):
            v = int(value)
            if self._by_int is None:
                raise ValueError(f"label {v} is a number, the other labels are class names")
            if self.source == "numbered" and not 0 <= v < MAX_NUMBERED:
                raise ValueError(f"label {v} is {'negative' if v < 0 else 'too large'}: integer labels without "
                                 f"class names are 0..{MAX_NUMBERED - 1} (give the class names, classes=)")
            if not 0 <= v < len(self._by_int):
                raise ValueError(f"label {v} outside the {len(self._by_int)} classes (0..{len(self._by_int) - 1})")
            return self._by_int[v]
        if isinstance(value, str):
            if value in self._by_name:
                return self._by_name[value]
            raise ValueError(f"label {value!r} is not a class of {self.space.name}")
        raise ValueError(f"label {value!r} is neither an integer nor a class name")

    @property
    def class_names(self) -> list[str]:
        """Display names by label value; ImageNet-1k uses the short WordNet names, as the image-folder reader."""
        if self.source == "imagenet":
            return imagenet_class_names()
        return list(self.space.class_names)

    def class_name(self, label: int) -> str:
        return imagenet_classes()[label].name if self.source == "imagenet" else self.space.class_names[label]


def coded(raw: Sequence[Any], coder: LabelCoder, where: Callable[[int], str],
          bad: list[tuple[str, str]]) -> list[int | None]:
    """Label values of ``raw``; a value that does not code adds ``(where(i), reason)`` to ``bad``."""
    out: list[int | None] = []
    for i, value in enumerate(raw):
        try:
            out.append(coder.code(value))
        except ValueError as exc:
            bad.append((where(i), str(exc)))
            out.append(None)
    return out
