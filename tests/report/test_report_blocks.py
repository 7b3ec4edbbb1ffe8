"""report/blocks.py: the Markdown export of summary blocks (bold and escaping added there, never stored) and
its round trip through markdown_parse.markdown_blocks (tests/markdown_parse.py)."""

from __future__ import annotations

import doctest

import pytest

from markdown_parse import markdown_blocks
from shiftbench.report import blocks as B


def test_export_of_each_kind_and_the_round_trip():
    blocks = [{"kind": "heading", "text": "Title <b>"},
              {"kind": "text", "text": "two\nlines"},
              {"kind": "list", "items": ["a: holds", "b: n/a"]},
              {"kind": "table", "head": ["x", "y | z"], "first_bold_rows": [1],
               "rows": [["1", B.cell("a|b", "n = 3 images")], [B.cell("mean", cls="mean"), "2"], ["", None], ["-", "3"]]}]
    md = B.blocks_to_markdown(blocks)
    assert md == ("### Title &lt;b>\n\ntwo lines\n\n- a: holds\n- b: n/a\n\n| x | y \\| z |\n|---|---|\n"
                  "| 1 | a\\|b |\n| **mean** | **2** |\n|  |  |\n| - | 3 |\n")
    back = markdown_blocks(md)
    assert back[0] == {"kind": "heading", "text": "Title <b>"} and back[1] == {"kind": "text", "text": "two lines"}
    assert back[-1]["head"] == ["x", "y | z"]
    # an all-empty row reads as a separator line there; every other row comes back as written
    assert back[-1]["rows"] == [["1", "a|b"], ["**mean**", "**2**"], ["-", "3"]]
    assert B.strings_of(blocks) == ["Title <b>", "two\nlines", "a: holds", "b: n/a", "x", "y | z", "1", "a|b",
                                    "n = 3 images", "mean", "2", "", "", "-", "3"]


def test_cells_and_refusals():
    assert B.cell_text("x") == "x" and B.cell_text({"text": "y", "cls": "mean"}) == "y" and B.cell_text(None) == ""
    assert B.cell("5") == "5" and B.cell("5", "n = 2") == {"text": "5", "title": "n = 2"}
    with pytest.raises(ValueError, match="cell class 'bold'"):
        B.cell("5", cls="bold")
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        B.blocks_to_markdown([{"kind": "table", "head": ["a", "b"], "rows": [["1"]]}])
    with pytest.raises(ValueError, match="unknown block kind 'html'"):
        B.blocks_to_markdown([{"kind": "html", "text": "<p>"}])
    assert B.blocks_to_markdown([{"kind": "heading", "text": "T", "level": 2}]) == "## T\n"


def test_module_doctest():
    assert doctest.testmod(B).failed == 0
