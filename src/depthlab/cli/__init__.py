"""The ``depthlab`` command. Every command takes ``--json`` and then prints exactly one JSON object to stdout.

``app`` (the Typer app and its plugin-loading callback) and ``main`` are in :mod:`.app`; what commands share
(options, the JSON emitter, opening stores and runs, progress bars, tables) in :mod:`.common`; each command group
in a module of its own that registers its commands on ``app`` when imported: ``llm`` (llm-prompts, llm-bench),
``construct``, ``report``, ``induction`` (induction, export), ``runs`` (tasks, sample, train, sweep, runs),
``reproduce`` (reproduce, capability, bench) and ``analyze``.
"""

from depthlab.cli.app import app, main

# Each module registers its commands on ``app`` when imported; ``depthlab --help`` lists them in this order.
# isort: off
from depthlab.cli import llm, construct, report, induction, runs, reproduce, analyze  # noqa: F401
# isort: on

__all__ = ["app", "main"]
