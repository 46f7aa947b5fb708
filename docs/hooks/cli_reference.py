"""MkDocs hook: the command-line reference page (reference/cli.md), generated from the Typer app at build time.

The page is never written into docs/: it is a generated file of this build, so it cannot drift from ``depthlab
--help``. Typer's own documentation generator (``typer … utils docs``) writes it.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/cli.md"
INTRO = ("Generated from the command-line app when the site is built (Typer's `utils docs`): the same text as "
         "`depthlab COMMAND --help`. Every command takes `--json` and then prints one JSON object.\n\n")


def cli_markdown() -> str:
    import typer.cli
    import typer.main

    from depthlab.cli import app

    command = typer.main.get_command(app)
    text = typer.cli.get_docs_for_click(obj=command, ctx=typer.Context(command), name="depthlab")
    title, _, body = text.partition("\n")
    return f"{title}\n\n{INTRO}{escape_brackets(body)}"


def escape_brackets(markdown: str) -> str:
    """Help text such as ``[layer][head]`` is not a link: its brackets are escaped outside code spans and blocks."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and not line.startswith("```"):
            parts = line.split("`")
            line = "`".join(part.replace("[", "\\[") if i % 2 == 0 else part for i, part in enumerate(parts))
        lines.append(line)
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, content=cli_markdown()))
    return files
