"""What there is to train: the tasks and model families by name, and a task built from its parameters."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..tasks.base import Task


@functools.cache
def load_plugins() -> None:
    """Once per process: tasks of installed packages (entry points) and of ``$DEPTHLAB_PLUGINS``, as the CLI
    loads them (a plugin file of your own: ``import`` it, or ``depthlab.plugins.load_plugin_file(path)``)."""
    from ..plugins import load_plugins as load

    load()


def task(name: str, **params: Any) -> Task:
    """The task ``name`` with ``params`` (the rest at their defaults), e.g. ``depthlab.task("icqa", k=2)``.

    A task samples (``sample(n, rng, split)``), enumerates its dataset where it is finite (``enumerate()``,
    ``dataset_size``), decodes an example in seed 001 Table 1 notation (``decode(batch, i)``) and knows its chance
    level (``chance``); ``depthlab tasks`` lists every parameter. A wrong name or value is a
    :class:`depthlab.errors.UserError` naming the field and what is allowed.
    """
    from ..config import parse_task

    load_plugins()
    return parse_task({"name": name, **params})


def list_tasks() -> list[str]:
    """The names of every task, built-in and from plugins, sorted."""
    from ..tasks import TASKS

    load_plugins()
    return sorted(TASKS)


def list_models() -> list[str]:
    """The names of every model family (``attention_only``, ``transformer``, ``lstm``, …), sorted."""
    from ..models import MODELS

    load_plugins()
    return sorted(MODELS)
