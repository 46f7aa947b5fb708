"""The option every command that draws shares: ``--format``, the vector file written next to each PNG."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import UserError

FORMATS = ("png", "pdf", "svg")

FormatOpt = Annotated[str, typer.Option(
    "--format", help="png: figures as PNG; pdf or svg: each figure also as a vector file of that format, next to "
                     "its PNG (same name)")]


def vector_format(value: str) -> str | None:
    """The vector format ``--format`` asks for, None for PNG only; a UserError for any other value."""
    if value not in FORMATS:
        raise UserError(f"--format: unknown format {value!r}; allowed: {', '.join(FORMATS)}")
    return None if value == "png" else value
