"""The store of a Ray sweep: one writer actor on the driver's node, and the proxy the workers use.

Kept apart from ``ray_executor`` so that the actor's process imports only the store (no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..store import Store, artifacts_folder


class StoreWriter:
    """The one process that opens the store for a Ray sweep (an actor on the driver's node)."""

    def __init__(self, root: str) -> None:
        self.store = Store(root)
        self.stopping = False

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.store, method)(*args, **kwargs)

    def stop(self) -> None:
        """The sweep is being stopped: tasks that start from now on return at once (ray.cancel can miss them)."""
        self.stopping = True

    def is_stopping(self) -> bool:
        return self.stopping


class RemoteStore:
    """The store as a Ray worker sees it: calls go to the store writer; artifact files are written in place.

    Offers every public method of :class:`~depthlab.store.Store`; ``run_folder`` and ``artifact_path`` (where
    checkpoints go) are computed locally, under the same root.
    """

    run_id = staticmethod(Store.run_id)
    # Store's own methods, run on this object: they use only artifacts_root (and each other).
    run_folder = Store.run_folder
    artifact_path = Store.artifact_path

    def __init__(self, root: str | Path, writer: Any) -> None:
        self.root = Path(root)
        self.artifacts_root = artifacts_folder(self.root)
        self._writer = writer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or not callable(getattr(Store, name, None)):
            raise AttributeError(name)
        import ray

        def call(*args: Any, **kwargs: Any) -> Any:
            return ray.get(self._writer.call.remote(name, args, kwargs))

        return call
