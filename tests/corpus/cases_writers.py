"""Corpus cases of issue 25: writers never destroy; unusable out folders and damaged stores are one line.

``extra`` of a case, read by tests/test_corpus.py and tests/test_writers_safety.py:

- ``out_files``: files (path relative to ``{out}`` -> text) written into ``{out}`` before the command, as a
  user's own files would be there;
- ``unchanged``: paths relative to ``{out}`` that must hold the same bytes after the command (every one of
  ``out_files`` that the case is about).
"""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path

from corpus.case import Case, write_png, write_text

_SQLITE_HEADER = b"SQLite format 3\x00"


def _image_folder(folder: Path) -> None:
    """``data/``: an image folder of two classes, one small PNG each."""
    write_png(folder / "data" / "c0" / "img0.png", seed=1)
    write_png(folder / "data" / "c1" / "img1.png", seed=2)


def _with_file(folder: Path) -> None:
    write_text(folder / "afile", "a user's file where a folder was asked for\n")


def _damaged_store(folder: Path) -> None:
    """An SQLite header on pages of garbage: what a disk error or a bad copy leaves of a store."""
    body = bytes((i * 37 + 11) % 251 for i in range(4096 - len(_SQLITE_HEADER)))
    (folder / "results.store").write_bytes(_SQLITE_HEADER + body)


def _empty_store(folder: Path) -> None:
    (folder / "results.store").write_bytes(b"")


GENERATE = ["generate", "--dataset", "data", "--shift", "gaussian_noise", "--severity", "1"]

CASES = [
    Case("generate-out-inside-dataset", _image_folder, GENERATE + ["--out", "data/shifted"], 2,
         "--out data/shifted is inside the dataset data",
         "an out folder inside the source made its outputs new classes of the source", "files-lost"),
    Case("generate-out-is-dataset", _image_folder, GENERATE + ["--out", "data"], 2,
         "--out data is the dataset data itself",
         "generate wrote its shift folders among the source's class folders", "files-lost"),
    Case("generate-dataset-inside-out", _image_folder, GENERATE + ["--out", "."], 2,
         "--out . contains the dataset data",
         "an out folder around the source holds the data the outputs are read back with", "files-lost"),
    Case("generate-keeps-users-part-file", _image_folder, GENERATE + ["--out", "{out}"], 0, "wrote 2 outputs",
         "generate removed every *.part file under --out, a user's half-downloaded file too", "files-lost",
         extra={"out_files": {"x.part": "half a download\n", "notes/y.part": "mine\n", ".hidden": "mine\n"},
                "unchanged": ["x.part", "notes/y.part", ".hidden"]}),
    Case("generate-settings-file-not-json", _image_folder, GENERATE + ["--out", "{out}"], 2,
         "generate.json: not a generate settings file",
         "a generate.json that is not JSON ended in a traceback (and is the user's file)", "traceback",
         extra={"out_files": {"generate.json": "my own notes, not JSON\n"}, "unchanged": ["generate.json"]}),
    Case("report-damaged-store", _damaged_store, ["report", "--store", "results.store", "--out", "{out}"], 2,
         "results.store: not a shiftbench store (file is not a database)",
         "a store with damaged pages ended in a traceback from sqlite3", "traceback"),
    Case("report-empty-store", _empty_store, ["report", "--store", "results.store", "--out", "{out}"], 2,
         "results.store: not a shiftbench store (an empty file)",
         "report on an empty file wrote a store's schema into it", "files-lost"),
    Case("report-out-under-a-file", _with_file, ["report", "--store", "results.store", "--out", "afile/report"], 2,
         "--out afile/report: cannot create the folder",
         "an --out below a file ended in a traceback (NotADirectoryError)", "traceback"),
]

# the issue-25 class of each case (files-lost, numbers silently wrong, traceback, dry-run promise)
KINDS = {
    "generate-out-inside-dataset": "files-lost",
    "generate-out-is-dataset": "files-lost",
    "generate-dataset-inside-out": "files-lost",
    "generate-keeps-users-part-file": "files-lost",
    "generate-settings-file-not-json": "files-lost",
    "report-damaged-store": "traceback",
    "report-empty-store": "files-lost",
    "report-out-under-a-file": "traceback",
}
CASES = [replace(case, kind=KINDS[case.name]) for case in CASES]
