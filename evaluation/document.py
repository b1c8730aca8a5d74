"""A tiny document model rendered to both Markdown and HTML, so the two reports never disagree."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

#: thumbnails are tiny (the image cache can be 32 px); the browser scales them up to this width
THUMBNAIL_DISPLAY_PX = 96


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class GalleryItem:
    """One entry of a gallery cell: an image (path relative to the report), a text, or both.

    ``marked`` flags a correct retrieval (the query's own pair); it is rendered as a ✓ and a green frame.
    """

    text: str = ""
    image: str | None = None
    marked: bool = False
    note: str = ""


@dataclass
class Gallery:
    """A table whose cells hold lists of :class:`GalleryItem` (e.g. a query and its top-3 results)."""

    headers: list[str]
    rows: list[list[list[GalleryItem]]]
    caption: str = ""


@dataclass
class Document:
    title: str
    blocks: list[tuple[str, object]] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def subheading(self, text: str) -> None:
        self.blocks.append(("h3", text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, headers: list[str], rows: list[list[str]], caption: str = "") -> None:
        if any(len(row) != len(headers) for row in rows):
            raise ValueError(f"every table row needs {len(headers)} cells (one per header {headers})")
        self.blocks.append(("table", Table(headers, rows, caption)))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(("img", (path, alt)))

    def gallery(self, headers: list[str], rows: list[list[list[GalleryItem]]], caption: str = "") -> None:
        if any(len(row) != len(headers) for row in rows):
            raise ValueError(f"every gallery row needs {len(headers)} cells (one per header {headers})")
        self.blocks.append(("gallery", Gallery(headers, rows, caption)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def image_paths(self) -> list[str]:
        """Every image the document references (figures and gallery thumbnails), in order."""
        paths = []
        for kind, value in self.blocks:
            if kind == "img":
                paths.append(value[0])
            elif kind == "gallery":
                paths += [item.image for row in value.rows for cell in row for item in cell if item.image]
        return paths

    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            if kind == "h2":
                out += [f"## {value}", ""]
            elif kind == "h3":
                out += [f"### {value}", ""]
            elif kind == "p":
                out += [str(value), ""]
            elif kind == "code":
                out += ["```", str(value), "```", ""]
            elif kind == "img":
                path, alt = value
                out += [f"![{alt}]({path})", ""]
            elif kind == "table":
                out += _markdown_table(value.headers, value.rows, value.caption)
            elif kind == "gallery":
                gallery: Gallery = value
                rows = [[_markdown_cell(cell) for cell in row] for row in gallery.rows]
                out += _markdown_table(gallery.headers, rows, gallery.caption)
        return "\n".join(out)

    def to_html(self) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for kind, value in self.blocks:
            if kind == "h2":
                body.append(f"<h2>{html.escape(str(value))}</h2>")
            elif kind == "h3":
                body.append(f"<h3>{html.escape(str(value))}</h3>")
            elif kind == "p":
                body.append(f"<p>{_inline_code(html.escape(str(value)))}</p>")
            elif kind == "code":
                body.append(f"<pre>{html.escape(str(value))}</pre>")
            elif kind == "img":
                path, alt = value
                body.append(
                    f'<figure><img src="{html.escape(path)}" alt="{html.escape(alt)}">'
                    f"<figcaption>{html.escape(alt)}</figcaption></figure>"
                )
            elif kind == "table":
                table: Table = value
                rows = [[_html_data_cell(cell) for cell in row] for row in table.rows]
                words = (
                    {i for i, cell in enumerate(table.rows[0]) if not _NUMERIC.fullmatch(cell)}
                    if rows
                    else set()
                )
                body.append(_html_table(table.headers, rows, table.caption, "data", words))
            elif kind == "gallery":
                gallery: Gallery = value
                rows = [[f"<td>{_html_cell(cell)}</td>" for cell in row] for row in gallery.rows]
                body.append(_html_table(gallery.headers, rows, gallery.caption, "gallery"))
        style = (
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
            "table{border-collapse:collapse;margin:1em 0 0.3em}th,td{border:1px solid #bbb;padding:4px 10px}"
            "table.data td,table.data th{text-align:right}table.data th:first-child,"
            "table.data td:first-child{text-align:left}th{background:#f0f0f0}"
            "p.caption{font-style:italic;margin-top:0.3em;font-size:95%}"
            "pre{background:#f6f6f6;padding:8px;overflow-x:auto}figure{margin:1em 0}"
            "figure img{max-width:100%}figcaption{font-style:italic;font-size:90%}"
            "table.data td.text,table.data th.text{text-align:left}code{background:#f3f3f3;padding:0 3px}"
            "table.gallery td{vertical-align:top;text-align:left;font-size:85%}"
            ".item{display:block;margin:2px 0 6px;padding:3px;border:2px solid transparent}"
            f".item.picture{{display:inline-block;vertical-align:top;width:{THUMBNAIL_DISPLAY_PX + 10}px;"
            "margin-right:6px}.item.marked{border-color:#2a2}"
            f".item img{{width:{THUMBNAIL_DISPLAY_PX}px;height:{THUMBNAIL_DISPLAY_PX}px;"
            "image-rendering:pixelated;display:block}.note{color:#666;font-size:90%}.pictures{white-space:nowrap}"
        )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
        )


def _markdown_table(headers: list[str], rows: list[list[str]], caption: str) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    if caption:
        out += ["", f"*{caption}*"]
    out.append("")
    return out


def _markdown_cell(items: list[GalleryItem]) -> str:
    parts = []
    for item in items:
        # a pipe or a line break would end the Markdown table cell
        text = item.text.replace("|", "\\|").replace("\n", " ")
        piece = f"![thumbnail]({item.image})" if item.image else ""
        if text:
            piece += (" " if piece else "") + text
        if item.note:
            piece += f" _({item.note})_"
        if item.marked:
            piece = "✓ " + piece
        parts.append(piece)
    return "<br>".join(parts)


def _html_cell(items: list[GalleryItem]) -> str:
    parts = []
    for item in items:
        inner = ""
        if item.image:
            inner += f'<img src="{html.escape(item.image)}" alt="thumbnail">'
        if item.text:
            inner += f"<div>{html.escape(item.text)}</div>"
        if item.note or item.marked:
            inner += f'<div class="note">{"✓ " if item.marked else ""}{html.escape(item.note)}</div>'
        classes = "item" + (" picture" if item.image else "") + (" marked" if item.marked else "")
        parts.append(f'<div class="{classes}">{inner}</div>')
    # thumbnails of one cell stay on one row (a query's top-k side by side)
    pictures = bool(items) and all(item.image for item in items)
    return f'<div class="pictures">{"".join(parts)}</div>' if pictures else "".join(parts)


def _inline_code(escaped: str) -> str:
    """`code` spans are Markdown; show them as code in HTML too."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


_NUMERIC = re.compile(r"[\s\d.,:+\-−±%\[\]()]*|n/a")


def _html_data_cell(cell: str) -> str:
    """Numbers are right-aligned (the table default); words are left-aligned."""
    escaped = html.escape(cell)
    return f"<td>{escaped}</td>" if _NUMERIC.fullmatch(cell) else f'<td class="text">{escaped}</td>'


def _html_table(
    headers: list[str],
    rows: list[list[str]],
    caption: str,
    css_class: str,
    text_columns: set[int] = frozenset(),
) -> str:
    """``rows`` hold cells that are already HTML ``<td>`` elements; ``text_columns`` get left-aligned headers."""
    head = "".join(
        ('<th class="text">' if i in text_columns else "<th>") + f"{html.escape(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    # a <caption> wraps to the table's width, which squeezes long captions under narrow tables
    caption_html = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{caption_html}'
