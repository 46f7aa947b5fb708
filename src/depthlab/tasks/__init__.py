"""Tasks: the sequence tasks of seed 001 (§4.1–§4.4, §7), registered by name in ``TASKS``."""

from depthlab.tasks import icqa, ictm, memorization, nested_icqa, template  # noqa: F401  (registers the tasks)
from depthlab.tasks.base import TASKS, Batch, Task

__all__ = ["TASKS", "Batch", "Task"]
