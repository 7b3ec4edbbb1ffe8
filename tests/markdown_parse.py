"""Markdown read back into the report's blocks (report.blocks): headings, paragraphs and pipe tables, each cell
plain text (``markdown_plain``). The tests round-trip a summary's Markdown export through it."""

from __future__ import annotations

import re
from typing import Any

from shiftbench.report.blocks import markdown_plain


def markdown_blocks(text: str) -> list[dict[str, Any]]:
    """Split simple Markdown (headings, paragraphs, pipe tables) into blocks the template renders
    with autoescaping: no Markdown-to-HTML conversion, so nothing in the data becomes markup."""
    blocks: list[dict[str, Any]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if not line:
            i += 1
            continue
        if line.startswith("#"):
            blocks.append({"kind": "heading", "text": markdown_plain(line.lstrip("#").strip())})
            i += 1
        elif line.startswith("|"):
            table = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [markdown_plain(c.strip()) for c in _split_row(lines[i])]
                if not all(set(c) <= set("-: ") for c in cells):
                    table.append(cells)
                i += 1
            blocks.append({"kind": "table", "head": table[0] if table else [], "rows": table[1:]})
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|")):
                para.append(lines[i].strip())
                i += 1
            blocks.append({"kind": "text", "text": markdown_plain(" ".join(para))})
    return blocks


def _split_row(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return re.split(r"(?<!\\)\|", inner)
