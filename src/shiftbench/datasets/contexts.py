"""Object contexts for your own data: the natural scenes (sky, water, grass, ...) a class or an image belongs to.

Mixed-Same / Mixed-Rand (``background_scene`` with ``scene: mixed_same`` / ``mixed_rand``) draw the new
scene among those sharing a context with the object, or sharing none. The ``objects`` dataset knows its
objects' contexts; an image folder is told them with ``dataset_params: {contexts: SOURCE}``:

- a TSV file: one ``KEY<TAB>CONTEXTS`` per line, CONTEXTS comma-separated (``grass,forest``); blank lines,
  ``#`` comments and a header line ``key<TAB>contexts`` are skipped;
- a JSON file (``.json``): ``{"KEY": ["grass", "forest"], ...}`` (a comma-separated string works too);
- ``bundled``: the table shipped with shiftbench for ImageNet wnid folders: the 80 wnids of the ``objects``
  dataset's objects with their reviewed contexts (tools/objects_contexts.tsv; :func:`bundled_contexts`).

A KEY is a class folder's name or an image's path relative to the root (its sample id, ``cat/1.png``); an
image's own line wins over its class's. The contexts are those of ``objects.CONTEXTS``. A source that names
an unknown context, repeats a key (naming both lines, TSV and JSON alike), names neither a class nor an image of
the folder, or leaves an image without contexts is refused in one line when the dataset is opened: every sample
then carries ``meta["contexts"]``, so a dry run and the run accept or refuse the same samples.

>>> bundled_contexts()["n01514859"]  # hen
('grass',)
"""

from __future__ import annotations

import difflib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..errors import ShiftbenchError
from .common import one_line, parse_json, shown
from .objects import CONTEXTS, object_ids, object_info

__all__ = ["BUNDLED", "bundled_contexts", "read_contexts", "assign_contexts", "parse_context_list"]

BUNDLED = "bundled"
_HEADER = ("key", "class", "image", "wnid", "id")


@lru_cache(maxsize=None)
def bundled_contexts() -> dict[str, tuple[str, ...]]:
    """ImageNet wnid -> contexts, from the ``objects`` dataset's reviewed table (a wnid of several objects,
    such as the two hens, gets the union of theirs, in ``CONTEXTS`` order)."""
    table: dict[str, set[str]] = {}
    for object_id in object_ids():
        info = object_info(object_id)
        table.setdefault(info.wnid, set()).update(info.contexts)
    return {wnid: tuple(c for c in CONTEXTS if c in found) for wnid, found in sorted(table.items())}


def parse_context_list(value: Any, where: str) -> tuple[str, ...]:
    """A list of contexts (a list of names or one comma-separated string), checked against ``CONTEXTS``."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(c, str) for c in items):
        raise ShiftbenchError(f"{where}: contexts must be a list of names or a comma-separated string, got {value!r}")
    names = [c.strip() for c in items if c.strip()]
    if not names:
        raise ShiftbenchError(f"{where}: no contexts given (choose from {', '.join(CONTEXTS)})")
    unknown = sorted(set(names) - set(CONTEXTS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONTEXTS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ShiftbenchError(f"{where}: unknown context {unknown[0]!r}{hint}; the contexts are {', '.join(CONTEXTS)}")
    return tuple(c for c in CONTEXTS if c in names)


def read_contexts(source: Any) -> dict[str, tuple[str, ...]]:
    """KEY -> contexts from a TSV or JSON file, or the bundled wnid table for ``"bundled"``."""
    if isinstance(source, str) and source == BUNDLED:
        return dict(bundled_contexts())
    if not isinstance(source, (str, os.PathLike)) or not str(source):
        raise ShiftbenchError(f"contexts must be a TSV or JSON file, or {BUNDLED!r}; got {source!r}")
    path = Path(os.fspath(source)).expanduser()
    where = f"contexts {shown(path)}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShiftbenchError(f"{where}: no such file (a TSV or JSON file mapping a class or an image to its "
                              f"contexts, or {BUNDLED!r} for ImageNet wnid folders)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ShiftbenchError(f"{where}: cannot read it ({one_line(exc)})") from None
    table: dict[str, tuple[str, ...]] = {}
    lines: dict[str, int] = {}  # key -> the line that gave it, to name both lines of a repeated key

    def once(key: str, n: int) -> None:
        if key in lines:
            raise ShiftbenchError(f"{where}: {shown(key)} is given twice, on lines {lines[key]} and {n} (one line "
                                  f"per class or image)")
        lines[key] = n

    if path.suffix.lower() == ".json":
        data = parse_json(text, where)
        if not isinstance(data, dict):
            raise ShiftbenchError(f"{where}: expected a JSON object {{class or image: [contexts]}}, "
                                  f"got {type(data).__name__}")
        # json.loads keeps a repeated key's last value silently: read the members again, in file order
        for key, n, value in _json_members(text):
            once(key, n)
            table[key] = parse_context_list(value, f"{where}: {shown(key)}")
        return table
    # lines as an editor numbers them: read_text turned \r\n and \r into \n (str.splitlines would also break
    # at \x1c, \u2028 and others inside a key)
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != 2:
            raise ShiftbenchError(f"{where}, line {n}: expected KEY<TAB>CONTEXTS (a class or an image, then "
                                  f"comma-separated contexts), got {len(cells)} column(s)")
        key, value = cells[0].strip(), cells[1]
        if not table and key.lower() in _HEADER and value.strip().lower() == "contexts":
            continue  # a header line
        once(key, n)
        table[key] = parse_context_list(value, f"{where}, line {n}")
    if not table:
        raise ShiftbenchError(f"{where}: no KEY<TAB>CONTEXTS lines")
    return table


def _json_members(text: str) -> Iterator[tuple[str, int, Any]]:
    """(key, line, value) of each member of the JSON object ``text`` (already parsed: valid, an object), in file
    order and with repeats, which ``json.loads`` folds into the last one."""
    decoder, space = json.JSONDecoder(), json.decoder.WHITESPACE
    i = space.match(text, space.match(text, 0).end() + 1).end()  # past the opening brace
    line, counted = 1, 0
    while text[i] != "}":
        line, counted = line + text.count("\n", counted, i), i
        key, i = json.decoder.scanstring(text, i + 1)
        i = space.match(text, space.match(text, i).end() + 1).end()  # past the colon
        value, i = decoder.raw_decode(text, i)
        yield key, line, value
        i = space.match(text, i).end()
        if text[i] == ",":
            i = space.match(text, i + 1).end()


def assign_contexts(table: Mapping[str, tuple[str, ...]], images: Mapping[str, str], source: Any,
                    kind: str, also: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """Each image's contexts (``images``: sample id -> class key): its own entry, else its class's.

    Refuses a key that is neither a class nor an image (``also``: other names a key may give, such as
    images left out as unreadable; the bundled table is not checked, it covers more wnids than a folder
    holds) and an image left without contexts, in one line each."""
    classes = set(images.values())
    named = f"contexts {BUNDLED!r}" if source == BUNDLED else f"contexts {shown(source)}"
    if source != BUNDLED:
        known = classes | set(images) | set(also)
        stray = [k for k in table if k not in known]
        if stray:
            close = difflib.get_close_matches(stray[0], sorted(classes), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            more = f" ({len(stray) - 1} more such keys)" if len(stray) > 1 else ""
            raise ShiftbenchError(f"{kind}: {named} names {shown(stray[0])}{hint}, neither a class folder nor an "
                                  f"image of the dataset{more}")
    out: dict[str, tuple[str, ...]] = {}
    missing: dict[str, int] = {}
    for image, cls in images.items():
        found = table.get(image, table.get(cls))
        if found is None:
            missing[cls] = missing.get(cls, 0) + 1
        else:
            out[image] = found
    if missing:
        listed = ", ".join(shown(c) for c in sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
        what = (f"the bundled table covers the {len(bundled_contexts())} ImageNet wnids of the objects dataset; "
                "give the others in a TSV file" if source == BUNDLED else "add a line per class")
        raise ShiftbenchError(f"{kind}: {named} gives no contexts for {sum(missing.values())} image(s) of "
                              f"{len(missing)} class(es): {listed}; {what} ('CLASS<TAB>grass,forest'; contexts: "
                              f"{', '.join(CONTEXTS)})")
    return out
