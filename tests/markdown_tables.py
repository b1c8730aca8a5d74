"""Reading sections and table rows back out of a Markdown report."""

from __future__ import annotations


def section(markdown: str, heading: str) -> str:
    start = markdown.index(f"## {heading}")
    following = markdown.find("\n## ", start + 1)
    return markdown[start : following if following > 0 else None]


def table_row(text: str, label: str, direction: str | None = None) -> list[str]:
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == label and (direction is None or cells[1] == direction):
            return cells
    raise AssertionError(f"no row {label!r} {direction or ''} in\n{text}")
