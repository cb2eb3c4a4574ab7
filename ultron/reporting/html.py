"""A self-contained HTML page: headings, tables and PNG images inlined as base64 (one file
that opens anywhere, mailed or uploaded, with nothing beside it)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Page", "fmt"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; margin: 0.5em 0 1.5em; }
.bad { color: #b00020; font-weight: bold; }
"""


def fmt(value: Any) -> str:
    """A cell's text: numbers to 4 significant digits (6 for scores of many digits)."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else str(value)


class Page:
    """Builds the page piece by piece; :meth:`render` gives its text."""

    def __init__(self, title: str) -> None:
        self.title = title
        self._parts: list[str] = [f"<h1>{html.escape(title)}</h1>"]

    def heading(self, text: str) -> None:
        self._parts.append(f"<h2>{html.escape(text)}</h2>")

    def paragraph(self, text: str, *, css: str | None = None) -> None:
        attribute = f' class="{css}"' if css else ""
        self._parts.append(f"<p{attribute}>{html.escape(text)}</p>")

    def table(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            self.paragraph("(nothing)")
            return
        columns = list(dict.fromkeys(key for row in rows for key in row))
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(fmt(row.get(c)))}</td>" for c in columns) + "</tr>"
            for row in rows
        )
        self._parts.append(f"<table><tr>{head}</tr>{body}</table>")

    def image(self, png: bytes, alt: str) -> None:
        data = base64.b64encode(png).decode("ascii")
        self._parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')

    def render(self) -> str:
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style></head>"
            f"<body>{''.join(self._parts)}</body></html>\n"
        )
