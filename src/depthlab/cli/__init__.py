"""The ``depthlab`` command. Every command takes ``--json`` and then prints exactly one JSON object to stdout.

``app`` (the Typer app and its plugin-loading callback) and the function that runs it are in :mod:`.app`; what
commands share (options, the JSON emitter, opening stores and runs, progress bars, tables) in :mod:`.common`; each
command group in a module of its own that registers its commands on ``app`` when imported: ``llm`` (llm-prompts,
llm-bench), ``construct``, ``report``, ``induction`` (induction, export), ``runs`` (tasks, sample, train, sweep,
runs), ``reproduce`` (reproduce, capability, bench), ``atlas`` and ``analyze``; the ``--format`` option of the
commands that draw in :mod:`.figures`. :func:`main`, the entry point, draws figures with a non-interactive backend
(Agg): the command's process chooses it, never an import of depthlab.
"""

import os
import sys

from depthlab.cli.app import app
from depthlab.cli.app import main as run_app

# Each module registers its commands on ``app`` when imported; ``depthlab --help`` lists them in this order.
# isort: off
from depthlab.cli import llm, construct, report, induction, runs, reproduce, atlas, analyze  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """The ``depthlab`` command: Agg for every figure this process draws (no window, no display needed), then the
    app. Matplotlib is imported only by the commands that draw: it reads ``MPLBACKEND`` then (so ``depthlab
    --help`` and ``depthlab tasks`` start without it); one already imported is switched now."""
    os.environ["MPLBACKEND"] = "agg"
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("agg")
    run_app()
