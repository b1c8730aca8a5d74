"""A tiny document model rendered to both Markdown and HTML, so the two reports never disagree."""

from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Document:
    title: str
    blocks: list[tuple[str, object]] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, headers: list[str], rows: list[list[str]], caption: str = "") -> None:
        self.blocks.append(("table", Table(headers, rows, caption)))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(("img", (path, alt)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            if kind == "h2":
                out += [f"## {value}", ""]
            elif kind == "p":
                out += [str(value), ""]
            elif kind == "code":
                out += ["```", str(value), "```", ""]
            elif kind == "img":
                path, alt = value
                out += [f"![{alt}]({path})", ""]
            elif kind == "table":
                table: Table = value
                out.append("| " + " | ".join(table.headers) + " |")
                out.append("|" + "|".join("---" for _ in table.headers) + "|")
                out += ["| " + " | ".join(row) + " |" for row in table.rows]
                if table.caption:
                    out += ["", f"*{table.caption}*"]
                out.append("")
        return "\n".join(out)

    def to_html(self) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for kind, value in self.blocks:
            if kind == "h2":
                body.append(f"<h2>{html.escape(str(value))}</h2>")
            elif kind == "p":
                body.append(f"<p>{html.escape(str(value))}</p>")
            elif kind == "code":
                body.append(f"<pre>{html.escape(str(value))}</pre>")
            elif kind == "img":
                path, alt = value
                body.append(f'<img src="{html.escape(path)}" alt="{html.escape(alt)}">')
            elif kind == "table":
                table: Table = value
                head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
                rows = "".join(
                    "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                    for row in table.rows
                )
                caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
                body.append(f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        style = (
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
            "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #bbb;padding:4px 10px;"
            "text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f0f0f0}"
            "caption{caption-side:bottom;font-style:italic;padding-top:4px}pre{background:#f6f6f6;padding:8px;"
            "overflow-x:auto}img{max-width:100%}"
        )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
        )
