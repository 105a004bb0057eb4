"""Markdown tables for the benchmark scripts: rendered once, printed and written to a file to commit."""

from __future__ import annotations

import os
from collections.abc import Sequence


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; every row must have one cell per column (cells are ``str()``-ed)."""
    if not columns:
        raise ValueError("markdown_table: no columns")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"markdown_table: row {i} has {len(row)} cells for {len(columns)} columns: {list(row)}"
            )
        cells = [str(c).replace("|", "\\|").replace("\n", " ") for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(path: str | os.PathLike, title: str, notes: Sequence[str], table: str) -> str:
    """Write ``# title``, one line per note, then the table to ``path`` (folders created); returns the text."""
    text = f"# {title}\n\n" + "".join(f"{n}\n" for n in notes) + ("\n" if notes else "") + table
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return text
