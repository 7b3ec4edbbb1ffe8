"""Files shiftbench writes: temporary names only it makes, atomic replacement, out folders apart from the data.

A writer creates, replaces and removes only files it made, inside its out folder. Every file is written
under a temporary name of shiftbench's own (``.<name>.shiftbench-<pid>-<8 hex>.part``, hidden, beside the
target) and renamed into place, so a kill never leaves half a file under the real name; the run that made
a temporary file removes it when the write fails. A later run removes only temporary files that match this
exact pattern and whose process has ended (:func:`remove_stale_temps`): a user's ``x.part`` is never touched.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> write_atomic(folder / "a.txt", "hello")
>>> (folder / "a.txt").read_text(), is_temp(temp_path(folder / "a.txt")), is_temp(folder / "a.txt.part")
('hello', True, False)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from .errors import ShiftbenchError

# the exclusive shape of a shiftbench temporary file; the target's name is cut to keep the whole under 255 bytes
TEMP_PATTERN = re.compile(r"^\..*\.shiftbench-(?P<pid>\d+)-[0-9a-f]{8}\.part$", re.DOTALL)
_NAME_CHARS = 120


def temp_path(target: str | os.PathLike) -> Path:
    """A fresh temporary name beside ``target`` that only shiftbench makes (pid and a random tag in it)."""
    target = Path(target)
    return target.with_name(f".{target.name[:_NAME_CHARS]}.shiftbench-{os.getpid()}-{secrets.token_hex(4)}.part")


def is_temp(path: str | os.PathLike) -> bool:
    """Whether ``path``'s name has the shape of a shiftbench temporary file."""
    return TEMP_PATTERN.match(Path(path).name) is not None


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target``, on failure it is removed.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "b.bin"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_bytes(b"xy")
    >>> target.read_bytes(), sorted(p.name for p in target.parent.iterdir())
    (b'xy', ['b.bin'])
    """
    tmp = temp_path(target)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic(target: str | os.PathLike, data: bytes | str, encoding: str = "utf-8") -> None:
    """Write ``data`` (bytes, or text in ``encoding``) to ``target`` through a temporary file and a rename."""
    with atomic_path(target) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding=encoding)
        else:
            tmp.write_bytes(data)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: it may be writing
    return True


def remove_stale_temps(folder: str | os.PathLike, recursive: bool = True) -> list[Path]:
    """Remove, in ``folder`` (and below it when ``recursive``), shiftbench temporary files and folders whose
    process has ended (a killed run's); entries of another name, and those of a process still running on
    this machine, stay. Returns the removed paths."""
    removed = []
    for here, dirs, names in os.walk(folder):
        for name in sorted(dirs) + names:
            match = TEMP_PATTERN.match(name)
            if match is None or _alive(int(match.group("pid"))):
                continue
            path = Path(here) / name
            if name in dirs:
                dirs.remove(name)  # not walked into: removed whole
                if path.is_symlink():
                    continue  # shiftbench makes no links: not its own
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
        if not recursive:
            break
    return removed


def _real(path: str | os.PathLike) -> Path:
    """``path`` absolute, with every link resolved (as far as the path exists; a link loop left as it is)."""
    path = Path(path).expanduser()
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def overlap(out: str | os.PathLike, source: str | os.PathLike) -> str | None:
    """How folder ``out`` overlaps ``source`` (a file or folder), symlinks resolved: "is", "is inside",
    "contains", or None when they are apart.

    >>> overlap("/data/x", "/data"), overlap("/data", "/data/x/y.jpg"), overlap("/a", "/b")
    ('is inside', 'contains', None)
    """
    out, source = _real(out), _real(source)
    if out == source:
        return "is"
    if source in out.parents:
        return "is inside"
    if out in source.parents:
        return "contains"
    return None


def check_apart(out: str | os.PathLike, sources: Iterable[str | os.PathLike], command: str,
                what: str = "dataset") -> None:
    """Refuse, before any work, an out folder at, inside or containing one of ``sources`` (one line naming both)."""
    for source in sources:
        how = overlap(out, source)
        if how is not None:
            real = _real(out), _real(source)
            shown = "" if (str(real[0]), str(real[1])) == (str(out), str(source)) else f" ({real[0]} and {real[1]})"
            place = {"is": f"is the {what} {source} itself", "is inside": f"is inside the {what} {source}",
                     "contains": f"contains the {what} {source}"}[how]
            raise ShiftbenchError(f"{command}: --out {out} {place}{shown}; the outputs would mix with the "
                                  f"{what}'s files; give an --out outside it")


def make_folder(folder: str | os.PathLike, command: str) -> bool:
    """Create ``folder`` (and its parents) for writing; returns whether it was created now. A path under a
    file, a read-only folder or any other reason it cannot be made is one line naming it."""
    folder = Path(folder)
    if folder.is_dir():
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ShiftbenchError(f"{command}: --out {folder}: the folder is not writable")
        return False
    if folder.exists() or folder.is_symlink():
        raise ShiftbenchError(f"{command}: --out {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        if folder.is_dir():
            return False  # made at the same moment by another process
        raise ShiftbenchError(f"{command}: --out {folder}: cannot create the folder (a file is in the way)") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ShiftbenchError(f"{command}: --out {folder}: cannot create the folder ({reason})") from None
    return True


def in_the_way(out: str | os.PathLike, name: str) -> bool:
    """Whether something stands at ``out/name``, or where one of its folders must go something other than a
    folder of its own (a file, a link that would lead the write out of ``out``)."""
    path = Path(out) / name
    if path.exists() or path.is_symlink():
        return True
    for parent in list(Path(name).parents)[:-1]:  # the last one is "."
        folder = Path(out) / parent
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return True
    return False


def read_files_record(record: str | os.PathLike, kind: str) -> set[str] | None:
    """The files a writer's record (``{"files": [...]}``, written beside its outputs) lists; None when there is
    no record; a record that is not one is a ShiftbenchError naming it (``kind``: "report", "export")."""
    record = Path(record)
    if not (record.exists() or record.is_symlink()):
        return None
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
        if isinstance(files, list) and all(isinstance(f, str) for f in files):
            return set(files)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise ShiftbenchError(f"{kind}: {record} is not the record of a shiftbench {kind}; use another --out")


def out_folder(out: str | os.PathLike, command: str) -> Path:
    """``out`` as a Path, refusing a value that names no folder: empty or only spaces (``Path("")`` is the
    current folder, where the files would land unasked), or holding a NUL (no file system takes one).

    >>> out_folder("res", "export").name
    'res'
    >>> out_folder(" ", "export")
    Traceback (most recent call last):
    ...
    shiftbench.errors.ShiftbenchError: export: --out is empty; give a folder
    """
    text = os.fspath(out)
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    if not text.strip():
        raise ShiftbenchError(f"{command}: --out is empty; give a folder")
    if "\x00" in text:
        raise ShiftbenchError(f"{command}: --out {text!r} holds a NUL character; give a folder name without it")
    return Path(out)


# a file name made from a name (a model label, a run id, a dataset): what every file system takes
STEM_CHARS = 64  # the readable part; with its hash, a suffix and an extension far below NAME_MAX (255 bytes)
_WINDOWS_RESERVED = re.compile(r"(?i)^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)$")


def _name_hash(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def file_stem(name: str, hashed: bool = False) -> str:
    """A file name (without extension) for ``name``: ASCII letters, digits, ``.``, ``_`` and ``-`` only (runs of
    anything else become ``_``), at most 64 of them, never starting or ending with ``.``, ``_`` or ``-``, never
    a Windows device name (``CON``, ``nul.txt``); when that changes the name (or ``hashed``), the first 10 hex
    digits of the SHA-256 of the whole name are added, so two names never meet by being cut or replaced.

    >>> file_stem("efficientnet_lite0"), file_stem("m:x/1"), file_stem("..")
    ('efficientnet_lite0', 'm_x_1-6e0bd1b3b3', '5ec1f7e700')
    >>> len(file_stem("x" * 1000)), file_stem("CON")
    (75, 'CON-a3dbc4b644')
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
    readable = slug[:STEM_CHARS].rstrip("._-")
    first, dot, rest = readable.partition(".")
    device = _WINDOWS_RESERVED.match(first) is not None  # Windows reads 'con.txt' as the device CON too
    if readable and readable == name and not hashed and not device:
        return readable
    if not readable:
        return _name_hash(name)
    return f"{first}-{_name_hash(name)}{dot}{rest}" if device else f"{readable}-{_name_hash(name)}"


def file_stems(names: Iterable[str]) -> dict[str, str]:
    """A :func:`file_stem` per distinct name, no two equal once case is folded (a case-insensitive file system,
    macOS' and Windows' defaults, would make them one file): names whose stems fold to one stem all get their
    hash, whatever the order they come in; a clash left after that (a hash meeting a name) is numbered, in
    the names' sorted order.

    >>> file_stems(["Ab", "ab", "c"])
    {'Ab': 'Ab-025b5573cb', 'ab': 'ab-fb8e20fc2e', 'c': 'c'}
    """
    stems = {n: file_stem(n) for n in dict.fromkeys(names)}
    folded: dict[str, list[str]] = {}
    for n, s in stems.items():
        folded.setdefault(s.casefold(), []).append(n)
    for members in folded.values():
        if len(members) > 1:
            for n in members:
                stems[n] = file_stem(n, hashed=True)
    taken: set[str] = set()
    final: dict[str, str] = {}
    for n in sorted(stems):
        stem, k = stems[n], 1
        while stem.casefold() in taken:
            k += 1
            stem = f"{stems[n]}-{k}"
        taken.add(stem.casefold())
        final[n] = stem
    return {n: final[n] for n in stems}
