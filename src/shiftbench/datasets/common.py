"""Shared reader machinery: safe paths inside a dataset root, and the corrupt-image policy.

Every reader resolves the file names it finds in annotation files with :func:`resolve_inside`, which refuses
absolute paths, ``..`` and symlinks that lead out of the root. Images are checked when a reader is built
(``verify="header"``: the file opens as an image, cheap) and decoded on ``load``; ``on_error`` says what a bad
file does: ``"fail"`` (default) raises :class:`BadImagesError` naming every bad file, ``"skip"`` leaves them
out and reports them in ``dataset.skipped`` and as one log line (logger ``shiftbench``, level WARNING). Nothing
is dropped without a report.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Callable, Iterator, Sequence, TypeVar

from ..errors import ImageError, Option, ShiftbenchError
from ..sample import image_error_reason, load_image
from .base import Dataset

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
ON_ERROR = ("fail", "skip")
VERIFY = ("header", "full", "none")
T = TypeVar("T")
log = logging.getLogger("shiftbench.datasets")


class BadImagesError(ImageError):
    """One or more images that cannot be read; ``files`` holds ``(path, reason)`` for each."""

    def __init__(self, files: Sequence[tuple[str, str]], root: Path | str):
        self.files = list(files)
        listed = "; ".join(f"{shown(name)} ({one_line(reason)})" for name, reason in self.files[:10])
        more = f"; and {len(self.files) - 10} more" if len(self.files) > 10 else ""
        super().__init__(  # the hint names on_error='skip' to Python callers, --on-error skip on the command line
            f"{len(self.files)} unreadable image(s) under {shown(root)}: {listed}{more}",
            hint=(" (pass ", Option("on_error", "skip"), " to leave them out and report them)"),
        )


def shown(name: Any) -> str:
    """``name`` (a file, member or record name from the data) as it can stand in a one-line message: as it
    is when plain, else quoted with Python escapes (newlines, control characters, undecodable bytes,
    leading or trailing spaces), so a hostile name can neither break the line nor hide.

    >>> shown("cat/1.png"), shown("a\\nb.png"), shown(" x")
    ('cat/1.png', "'a\\\\nb.png'", "' x'")
    """
    text = os.fspath(name) if isinstance(name, os.PathLike) else str(name)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return text if text and text.isprintable() and text == text.strip() else repr(text)


def one_line(text: Any) -> str:
    """A message part on one line: line breaks and other control characters escaped."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def parse_json(text: str | bytes, where: str) -> Any:
    """JSON text as Python values; one :class:`ShiftbenchError` naming ``where`` when it is malformed, not
    UTF-8 or nested too deeply to read (the parser's recursion limit, never a RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ShiftbenchError(f"{where}: JSON nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ShiftbenchError(f"{where}: not valid JSON ({one_line(exc)})") from None


def read_json(path: Path, what: str) -> Any:
    """The JSON file ``path`` (``what``: the reader, for the message); missing, unreadable or malformed
    files are one line naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShiftbenchError(f"{what}: {shown(path)} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ShiftbenchError(f"{what}: cannot read {shown(path)}: {one_line(exc)}") from None
    return parse_json(text, f"{what}: {shown(path)}")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ShiftbenchError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_root(root: Any, kind: str, want_dir: bool = True) -> Path:
    """The dataset root as a Path; a clear error when it is missing or of the wrong kind."""
    if root is None:
        raise ShiftbenchError(f"{kind}: root= is required (the dataset folder)")
    path = Path(os.fspath(root)).expanduser()
    if not path.exists():
        raise ShiftbenchError(f"{kind}: {path} does not exist")
    if want_dir and not path.is_dir():
        raise ShiftbenchError(f"{kind}: {path} is not a folder")
    return path


def resolve_inside(root: Path, name: Any, what: str = "path") -> Path:
    """``root / name`` resolved, refusing names that escape ``root``.

    Refused: absolute paths (POSIX or Windows style), any ``..`` component, and names whose resolved
    target (after following symlinks) lies outside the resolved root.

    >>> resolve_inside(Path("/data"), "../etc/passwd")
    Traceback (most recent call last):
    ...
    shiftbench.errors.ShiftbenchError: path '../etc/passwd' escapes the dataset root /data (contains '..')
    """
    if not isinstance(name, str) or not name:
        raise ShiftbenchError(f"{what} must be a non-empty string, got {name!r}")
    if "\x00" in name:
        raise ShiftbenchError(f"{what} {name!r} holds a NUL character; no file has such a name")
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or name.startswith(("\\", "/")):
        raise ShiftbenchError(f"{what} {name!r} is absolute; paths in annotation files must be relative to "
                              f"{shown(root)}")
    if ".." in posix.parts or ".." in windows.parts:
        raise ShiftbenchError(f"{what} {name!r} escapes the dataset root {shown(root)} (contains '..')")
    return check_inside(root, name, what)


def check_inside(root: Path, name: str, what: str = "path") -> Path:
    """``root / name`` for a name the file system listed below ``root`` (any characters: a class folder may be
    called ``c:`` or ``\\x`` on Linux), refusing only a symlink that leads out of ``root`` or loops."""
    try:
        real_root = root.resolve()
        target = (root / name).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13), a name too long
        raise ShiftbenchError(f"{what} {name!r} under {shown(root)} cannot be resolved ({one_line(exc)})") from None
    if target != real_root and real_root not in target.parents:
        raise ShiftbenchError(f"{what} {name!r} escapes the dataset root {shown(root)} (a symlink leads to "
                              f"{shown(target)})")
    return root / name


def check_image_file(path: Path, verify: str) -> str | None:
    """Why ``path`` is not a usable image (None if it is), by the chosen thoroughness.

    ``"header"`` opens the file (format and size known, Pillow's pixel-count guard applied);
    ``"full"`` reads it exactly as ``load`` will (decode, EXIF orientation, RGB conversion).
    """
    if verify == "none":
        return None
    if verify == "full":
        try:
            load_image(path)
        except ImageError as exc:
            return _reason(exc, path)
        return None
    from PIL import Image

    try:
        with Image.open(path):
            pass
    except Exception as exc:  # noqa: BLE001 - every decoder error is a reason, never a traceback
        return image_error_reason(exc)
    return None


def _reason(exc: ImageError, path: Path) -> str:
    """The message of a load error without its leading ``path: `` (the caller names the file)."""
    text = str(exc)
    prefix = f"{path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def screen(items: Sequence[T], paths: Callable[[T], Sequence[Path]], root: Path, on_error: str,
           verify: str) -> tuple[list[T], list[tuple[str, str]]]:
    """Check the image files of each item; fail or drop bad items by ``on_error``. Returns (kept, bad)."""
    kept: list[T] = []
    bad: list[tuple[str, str]] = []
    for item in items:
        problems = []
        for path in paths(item):
            reason = check_image_file(path, verify)
            if reason is not None:
                problems.append((_relative(path, root), reason))
        if problems:
            bad.extend(p for p in problems if p not in bad)
        else:
            kept.append(item)
    if bad and on_error == "fail":
        raise BadImagesError(bad, root)
    if bad:
        log.warning(skipped_line(bad, root))
    return kept, bad


def skipped_line(bad: Sequence[tuple[str, str]], root: Path | str) -> str:
    """One line for skipped files: how many, where, and the first few with their reasons."""
    listed = "; ".join(f"{shown(name)} ({one_line(reason)})" for name, reason in list(bad)[:5])
    more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
    return f"skipped {len(bad)} unreadable image(s) under {shown(root)}: {listed}{more}"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


class ReaderDataset(Dataset):
    """A reader with the corrupt-image policy: ``skipped`` lists every file left out and why.

    Iterating in ``on_error="skip"`` mode also skips (and records) files that passed the cheap check at
    construction but fail to decode; ``load(i)`` always raises for such a file, naming it.
    """

    on_error: str = "fail"
    skipped: list[tuple[str, str]]
    root: Path

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            try:
                yield self.load(i)
            except ImageError as exc:
                if self.on_error != "skip":
                    raise
                entry = (self.sample_id(i), str(exc))
                self.skipped.append(entry)
                log.warning(f"skipped unreadable image: {exc}")

    def info(self) -> dict[str, Any]:
        info = super().info()
        info["root"] = str(self.root)
        info["skipped"] = len(self.skipped)
        return info
