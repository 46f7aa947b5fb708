"""depthlab: what sequence models can learn, at which depth, and how.

From Python (:mod:`depthlab.api`; each name is imported on first use, so ``import depthlab`` costs nothing)::

    depthlab.task(name, **params), depthlab.list_tasks(), depthlab.list_models()
    depthlab.train(config, store=…, **overrides) -> RunResult       depthlab.sweep(…) -> [RunResult, …]
    depthlab.Store(path).runs() / .metrics(run_ids) -> DataFrame    .load_model(run_id, step=None) -> nn.Module
    depthlab.reproduce(name, scale="quick") -> the object `depthlab reproduce NAME --json` prints

From the shell: ``depthlab --help``.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

API = ("RunResult", "Store", "list_models", "list_tasks", "reproduce", "sweep", "task", "train")
__all__ = ["__version__", *API]

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `import depthlab` imports nothing at all
if TYPE_CHECKING:
    from typing import Any

    from .api import RunResult, Store, list_models, list_tasks, reproduce, sweep, task, train  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'depthlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})


class FunctionAndPackage:
    """``depthlab.train`` and ``depthlab.sweep`` name two things: the API's functions and the subpackages of the
    engine and the executors. This object is both: calling it calls the function (its signature and docstring are
    the function's), and its attributes are the subpackage's (``depthlab.train.engine``, once imported, as for any
    package; ``from depthlab.train import engine`` imports it)."""

    def __init__(self, name: str) -> None:
        from . import api

        function = getattr(api, name)
        self.package_name = f"{__name__}.{name}"
        self.__wrapped__ = function  # what inspect.signature, help() and IPython's `?` read
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(self, attribute, getattr(function, attribute))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def package(self) -> Any:
        import importlib

        return importlib.import_module(self.package_name)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self.package(), name)
        except AttributeError:
            raise AttributeError(f"{self.package_name} has no attribute {name!r} (a module of it is imported with "
                                 f"`from {self.package_name} import {name}`)") from None

    def __dir__(self) -> list[str]:
        return sorted({*dir(self.package()), "__wrapped__", "__doc__"})

    def __repr__(self) -> str:
        return f"<function {self.package_name} (and the package {self.package_name})>"


class _Shared:
    """A module attribute that is a :class:`FunctionAndPackage` (made on first use). The import system's record of
    the subpackage (``setattr(depthlab, "train", <module>)``) is dropped: the subpackage is in ``sys.modules``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.value = name, None

    def __get__(self, module: Any, owner: type | None = None) -> FunctionAndPackage:
        if self.value is None:
            self.value = FunctionAndPackage(self.name)
        return self.value

    def __set__(self, module: Any, value: Any) -> None:
        pass


class _Package(type(sys)):  # the module type
    train = _Shared()
    sweep = _Shared()


sys.modules[__name__].__class__ = _Package
