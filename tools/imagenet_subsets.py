"""Derive the shipped 200-class lists of ImageNet-R and ImageNet-A from timm's package data.

timm (Apache-2.0) ships each list twice in ``timm/data/_info/``: the wnids (``imagenet_r_synsets.txt``,
``imagenet_a_synsets.txt``) and their ImageNet-1k output indices (``imagenet_r_indices.txt``, ...). This tool
reads both, checks that every index is the position of its wnid in shiftbench's ImageNet-1k table
(src/shiftbench/data/imagenet/classes.tsv, sorted-wnid order) and writes one TSV per list, rows in ImageNet
order: ``index<TAB>wnid<TAB>name``. The lists are facts about the two datasets (Hendrycks et al. 2021); the
files carry their source in a comment line, and SOURCES.md beside them names the licence.

Usage:
  pip install timm==1.0.31
  python tools/imagenet_subsets.py            # writes src/shiftbench/data/imagenet/imagenet_{r,a}.tsv
  python tools/imagenet_subsets.py --check    # compares the shipped files with a fresh derivation, writes nothing
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shiftbench" / "data" / "imagenet"
LISTS = {"imagenet-r": "imagenet_r", "imagenet-a": "imagenet_a"}  # list name -> timm's file stem and ours


def timm_info(name: str) -> Path:
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("timm is not installed (pip install timm)")
    path = Path(list(spec.submodule_search_locations)[0], "data", "_info", name)
    if not path.is_file():
        sys.exit(f"{path}: not found in this timm ({importlib.metadata.version('timm')}); timm 1.0.31 has it")
    return path


def imagenet_table() -> list[tuple[str, str]]:
    """(wnid, name) of the 1,000 ImageNet-1k classes in output order, from the shipped classes.tsv."""
    lines = [line for line in (OUT / "classes.tsv").read_text("utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    return [(row[1], row[2]) for row in (line.split("\t") for line in lines[1:])]


def derive(stem: str) -> str:
    """The TSV text of one list: a comment naming the source, the header, one row per class in ImageNet order."""
    wnids = timm_info(f"{stem}_synsets.txt").read_text("utf-8").split()
    indices = [int(x) for x in timm_info(f"{stem}_indices.txt").read_text("utf-8").split()]
    table = imagenet_table()
    position = {wnid: i for i, (wnid, _) in enumerate(table)}
    if len(wnids) != len(indices) or len(set(wnids)) != len(wnids):
        sys.exit(f"timm's {stem} lists disagree: {len(wnids)} wnids ({len(set(wnids))} distinct), {len(indices)} indices")
    for wnid, index in zip(wnids, indices):
        if position.get(wnid) != index:
            sys.exit(f"timm's {stem}: {wnid} has index {index}, but classes.tsv puts it at {position.get(wnid)}")
    version = importlib.metadata.version("timm")
    rows = [f"{i}\t{table[i][0]}\t{table[i][1]}" for i in sorted(indices)]
    return (f"# {len(rows)} ImageNet-1k classes of {stem.replace('_', '-')} (ImageNet order). Source: timm {version} "
            f"data/_info/{stem}_synsets.txt and {stem}_indices.txt (Apache-2.0); written by tools/imagenet_subsets.py\n"
            "index\twnid\tname\n" + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the shipped files with timm's; write nothing")
    args = parser.parse_args(argv)
    differ = 0
    for name, stem in LISTS.items():
        text = derive(stem)
        path = OUT / f"{stem}.tsv"
        if args.check:
            same = path.is_file() and path.read_text("utf-8") == text
            differ += not same
            print(f"{path.relative_to(ROOT)}: {'same as' if same else 'DIFFERS from'} timm's {name} list")
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)} ({text.count(chr(10)) - 2} classes)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
