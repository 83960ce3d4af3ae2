"""An HTML table read back as its cells' text, row by row, for tests of the report tables."""

from __future__ import annotations

from html.parser import HTMLParser


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str, str]]] = []  # (tag, class, text) per cell
        self._cell: list[str] | None = None
        self._tag = self._class = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell, self._tag = [], tag
            self._class = dict(attrs).get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append((self._tag, self._class, "".join(self._cell).strip()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table_cells(html: str) -> list[list[tuple[str, str, str]]]:
    """Every row of the (first) table in `html`: (tag, class attribute, text) per cell, the
    text unescaped as a browser shows it."""
    parser = _Cells()
    parser.feed(html[html.index("<table"):html.index("</table>")])
    return parser.rows


def table_text(html: str) -> list[list[str]]:
    return [[text for _, _, text in row] for row in table_cells(html)]
