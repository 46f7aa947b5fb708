"""The one Typer app of ``depthlab``: its callback loads plugins before any command; :func:`main` runs it.

User mistakes print one line ``error: <field>: <what is allowed>`` to stderr and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from ..errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depthlab: what sequence models can learn, at which depth, and how.")

PluginOpt = Annotated[list[Path] | None, typer.Option(
    "--plugin", help="a Python file defining tasks of your own (repeatable; also $DEPTHLAB_PLUGINS, and "
                     "entry points of the group depthlab.tasks)")]


@app.callback()
def _load_plugins(plugin: PluginOpt = None) -> None:
    from ..plugins import load_plugins

    load_plugins(plugin)


def main() -> None:
    try:
        # Without standalone mode, Typer returns the exit code of a command that exits (Ctrl-C becomes 130).
        code = app(standalone_mode=False)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except click.exceptions.UsageError as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        raise SystemExit(2) from None
    except (click.exceptions.Abort, KeyboardInterrupt):
        code = 130
    except click.exceptions.Exit as e:
        code = e.exit_code
    if code == 130:
        print("interrupted", file=sys.stderr)
    if isinstance(code, int) and code:
        raise SystemExit(code)
