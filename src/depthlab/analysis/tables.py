"""Tables as plain data: what a command or a preset shows as a table, without saying how.

Analyses return a :class:`Table` of text cells; the CLI renders it with rich (``depthlab.cli.common``), a page
could render it as HTML. Titles and captions sit at the left unless a table asks for the centre.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Justify = Literal["left", "center", "right"]


@dataclass(frozen=True)
class Column:
    header: str
    justify: Justify = "left"
    no_wrap: bool = False  # keep the cells on one line (names) where the table still fits the terminal


@dataclass
class Table:
    columns: list[Column]
    title: str | None = None
    caption: str | None = None
    title_justify: Justify = "left"
    caption_justify: Justify = "left"
    compact: bool = False  # lines under the header only, no frame: for wide listings at 80 columns
    rows: list[list[str]] = field(default_factory=list)

    @classmethod
    def of(cls, *headers: str, **options) -> Table:
        """A table of left-aligned columns named ``headers`` (``options``: title, caption, justifications)."""
        return cls([Column(h) for h in headers], **options)

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append(list(cells))

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def markdown(self) -> str:
        """The table as GitHub Markdown: the title in bold above it, the caption below."""
        align = {"left": ":--", "center": ":-:", "right": "--:"}
        cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines = [f"**{cell(self.title)}**", ""] if self.title else []
        lines += ["| " + " | ".join(cell(c.header) for c in self.columns) + " |",
                  "|" + "|".join(align[c.justify] for c in self.columns) + "|"]
        lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in self.rows]
        return "\n".join(lines + (["", cell(self.caption)] if self.caption else [])) + "\n"
