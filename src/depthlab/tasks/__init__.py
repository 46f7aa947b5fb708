"""Tasks: the sequence tasks of seed 001 (§4.1–§4.4, §7), registered by name in ``TASKS``."""

from depthlab.tasks import (  # noqa: F401  (registers the tasks)
    conditional_retrieval,
    dyck,
    equality,
    icqa,
    ictm,
    index_lookup,
    induction,
    memorization,
    mqar,
    nearest_neighbor,
    nested_icqa,
    retrieval,
    template,
)
from depthlab.tasks.base import TASKS, Batch, Task, task_title

__all__ = ["TASKS", "Batch", "Task", "task_title"]
