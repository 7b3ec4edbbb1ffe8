"""Summary blocks: the structured content of a report summary, and its Markdown export.

A summary is built once as a list of blocks; the HTML template renders the blocks themselves (every
string through autoescaping, no Markdown parsed), and the ``.md`` files are written from the same
blocks by :func:`blocks_to_markdown`. Block strings are plain text: no ``**bold**`` and no backticks
inside them; emphasis is data, and the Markdown export adds the markup.

Blocks (dicts):

- ``{"kind": "heading", "text": str}``; an optional ``"level"`` (2..6, default 3) is used by the
  Markdown export only.
- ``{"kind": "text", "text": str}``: one paragraph.
- ``{"kind": "list", "items": [str, ...]}``: a bullet list.
- ``{"kind": "table", "head": [str, ...], "rows": [[cell, ...], ...], "first_bold_rows": [int, ...]}``:
  ``first_bold_rows`` (optional) lists the positions of rows shown bold as a whole. A cell is a str or
  ``{"text": str, "title": str, "cls": str}`` (``title`` = hover text, e.g. ``"n = 280 queries"``;
  ``cls`` one of ``"down"``, ``"up"``, ``"noise"``, ``"mean"``). A cell with ``cls == "mean"`` marks a
  mean / aggregate row: the HTML styles it, the Markdown export writes it bold.

>>> print(blocks_to_markdown([{"kind": "table", "head": ["a", "b|c"],
...                            "rows": [["1", {"text": "mean", "cls": "mean", "title": "n = 3"}]]}]))
| a | b\\|c |
|---|---|
| 1 | **mean** |
<BLANKLINE>
"""

from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["blocks_to_markdown", "markdown_text", "markdown_plain", "cell_text", "cell", "strings_of", "BLOCK_KINDS",
           "CELL_CLASSES"]

BLOCK_KINDS = ("heading", "text", "list", "table")
CELL_CLASSES = ("down", "up", "noise", "mean")


def cell_text(cell: str | dict[str, Any] | None) -> str:
    """The visible text of a table cell (a str, or a dict's ``"text"``); None reads as an empty cell."""
    if cell is None:
        return ""
    if isinstance(cell, dict):
        return str(cell.get("text", ""))
    return str(cell)


def cell(text: str, title: str | None = None, cls: str | None = None) -> str | dict[str, Any]:
    """A table cell: the plain string when there is neither hover text nor a class, else the dict form."""
    if cls is not None and cls not in CELL_CLASSES:
        raise ValueError(f"cell class {cls!r} is not one of {', '.join(CELL_CLASSES)}")
    if title is None and cls is None:
        return text
    out: dict[str, Any] = {"text": text}
    if title is not None:
        out["title"] = title
    if cls is not None:
        out["cls"] = cls
    return out


def strings_of(blocks: Iterable[dict[str, Any]]) -> list[str]:
    """Every string a reader can see or hover in ``blocks`` (texts, items, head, cell text and title)."""
    found: list[str] = []
    for b in blocks:
        if b["kind"] in ("heading", "text"):
            found.append(b["text"])
        elif b["kind"] == "list":
            found.extend(b["items"])
        elif b["kind"] == "table":
            found.extend(b["head"])
            for row in b["rows"]:
                for c in row:
                    found.append(cell_text(c))
                    if isinstance(c, dict) and c.get("title"):
                        found.append(c["title"])
    return found


# what can turn plain text into Markdown or HTML, and how each is made literal (CommonMark with GitHub's tables
# and strikethrough): backslash, backtick and * always escaped; _ unless inside a word (intraword _ opens no
# emphasis) or the only one outside words (it pairs with none); ~ unless between spaces; < unless a space follows
# (no tag, comment or autolink opens: &lt;); & only where an entity could (&amp;); ] before ( [ or : (no link,
# image or link definition); at a block's start the characters that begin a heading, quote, list, thematic
# break or definition
_INLINE = re.compile(r"[\\`*~]|_|<(?=\S)|&(?=#?[A-Za-z0-9]+;)|\](?=[(\[:])")
_BLOCK_START = re.compile(r"^(?:[#>+=\-\[]|\d+(?=[.)]))")
_CLOSING = re.compile(r"(?:^|(?<= ))#+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _in_word(text: str, i: int) -> bool:
    return text[i - 1:i].isalnum() and text[i + 1:i + 2].isalnum()


def _inline(match: re.Match, lone_underscore: bool) -> str:
    char, text, i = match.group(), match.string, match.start()
    if char == "<":
        return "&lt;"
    if char == "&":
        return "&amp;"
    if char == "_" and (lone_underscore or _in_word(text, i)):
        return char  # inside a word (efficientnet_lite0), or the only one that could open or close: no emphasis
    if char == "~" and not text[i - 1:i].strip() and not text[i + 1:i + 2].strip():
        return char  # between spaces it can neither open nor close a strikethrough: "color ~ texture"
    return "\\" + char


def markdown_text(text: Any, table: bool = False, block: bool = False, heading: bool = False) -> str:
    """``text`` as Markdown that renders as exactly that text, on one line: line breaks and runs of spaces
    folded to one space, markup characters escaped (a model label ``<b>x</b>``, ``**x**`` or ``[x](y)`` is shown,
    never rendered), control characters shown as ``\\xNN``; ``table``: a pipe-table cell (``|`` escaped);
    ``block``: the text starts a paragraph or list item (``# x``, ``1. x``, ``- x`` stay text); ``heading``: the
    text of an ATX heading (closing ``#`` kept).

    >>> markdown_text("<b>m</b> | **x** & `y`", table=True)
    '&lt;b>m&lt;/b> \\\\| \\\\*\\\\*x\\\\*\\\\* & \\\\`y\\\\`'
    >>> markdown_text("efficientnet_lite0 [12.5, 87.5] p >= 0.05"), markdown_text("1. x", block=True)
    ('efficientnet_lite0 [12.5, 87.5] p >= 0.05', '1\\\\. x')
    """
    text = " ".join(str(text).split())
    lone = sum(1 for i, c in enumerate(text) if c == "_" and not _in_word(text, i)) < 2  # emphasis needs two
    text = _INLINE.sub(lambda m: _inline(m, lone), text)
    if table:
        text = text.replace("|", "\\|")
    if block:
        text = _BLOCK_START.sub(lambda m: m.group() + "\\" if m.group()[0].isdigit() else "\\" + m.group(), text)
    if block or heading:
        text = _CLOSING.sub(lambda m: "\\" + m.group(), text)  # a heading's closing #s would be dropped
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_UNESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])|&lt;|&amp;")


def markdown_plain(text: str) -> str:
    """The text :func:`markdown_text` was given, from what it wrote (line breaks come back as spaces).

    >>> markdown_plain(markdown_text("<b>x</b> | &lt; **y** _z_", table=True))
    '<b>x</b> | &lt; **y** _z_'
    """
    return _UNESCAPE.sub(lambda m: m.group(1) or {"&lt;": "<", "&amp;": "&"}[m.group()], text)


def _escape(text: str) -> str:
    """A cell's text made safe for one pipe-table cell (:func:`markdown_text` with ``table``)."""
    return markdown_text(text, table=True)


def _md_cell(c: str | dict[str, Any] | None, bold: bool) -> str:
    text = _escape(cell_text(c))
    if text and (bold or (isinstance(c, dict) and c.get("cls") == "mean")):
        return f"**{text}**"
    return text


def blocks_to_markdown(blocks: Iterable[dict[str, Any]]) -> str:
    """The Markdown export of ``blocks``: headings, paragraphs, bullet lists and pipe tables, one blank
    line between blocks, ending in a newline. Bold (``first_bold_rows``, ``cls == "mean"`` cells) and
    escaping (``|`` in cells) are added here, never stored in the blocks."""
    parts: list[str] = []
    for b in blocks:
        kind = b.get("kind")
        if kind == "heading":
            level = int(b.get("level", 3))
            if not 1 <= level <= 6:
                raise ValueError(f"heading level {level} is not 1..6")
            parts.append("#" * level + " " + markdown_text(b["text"], heading=True))
        elif kind == "text":
            parts.append(markdown_text(b["text"], block=True))
        elif kind == "list":
            parts.append("\n".join("- " + markdown_text(item, block=True) for item in b["items"]))
        elif kind == "table":
            head = [_escape(h) for h in b["head"]]
            bold = set(b.get("first_bold_rows") or ())
            lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for i, row in enumerate(b["rows"]):
                if len(row) != len(head):
                    raise ValueError(f"table row {i} has {len(row)} cells for {len(head)} columns")
                lines.append("| " + " | ".join(_md_cell(c, i in bold) for c in row) + " |")
            parts.append("\n".join(lines))
        else:
            raise ValueError(f"unknown block kind {kind!r} (one of {', '.join(BLOCK_KINDS)})")
    return "\n\n".join(parts) + "\n"
