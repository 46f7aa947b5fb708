"""depthlab: what sequence models can learn, at which depth, and how.

From Python (:mod:`depthlab.api`; each name is imported on first use, so ``import depthlab`` costs nothing)::

    depthlab.task(name, **params), depthlab.list_tasks(), depthlab.list_models()
    depthlab.train(config, store=…, **overrides) -> RunResult       depthlab.sweep(…) -> [RunResult, …]
    depthlab.Store(path).runs() / .metrics(run_ids) -> DataFrame    .load_model(run_id, step=None) -> nn.Module
    depthlab.reproduce(name, scale="quick") -> the object `depthlab reproduce NAME --json` prints
    depthlab.plan(name, scale="paper") -> projected wall time here; depthlab.explain(name) -> seed settings
    depthlab.atlas(scale="quick", tasks=…, families=…) -> the object `depthlab atlas --json` prints
    depthlab.draw.attention(cache, tokens) -> one example's attention, every layer and head (depthlab.draw: figures)

From the shell: ``depthlab --help``.
"""

from __future__ import annotations

__version__ = "0.1.0"

API = ("RunResult", "Store", "atlas", "explain", "list_models", "list_tasks", "plan", "reproduce", "sweep", "task",
       "train")
SUBMODULES = ("draw",)  # reached as depthlab.draw after `import depthlab` alone, imported on first use
__all__ = ["__version__", *API]

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `import depthlab` imports nothing at all
if TYPE_CHECKING:
    from typing import Any

    from .api import (  # noqa: F401
        RunResult,
        Store,
        atlas,
        explain,
        list_models,
        list_tasks,
        plan,
        reproduce,
        sweep,
        task,
        train,
    )


def __getattr__(name: str) -> Any:
    if name in API:
        from . import api

        return getattr(api, name)
    if name in SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'depthlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API, *SUBMODULES})
