"""``depthlab.Store``: a store read from Python, as pandas tables and trained one-run models.

It is :class:`depthlab.store.Store` (everything the store does: ``find_runs``, ``get_run``, ``metric_columns``,
``artifacts``, ``records`` …) with three methods of its own: :meth:`Store.runs`, :meth:`Store.metrics` and
:meth:`Store.load_model`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import store
from ..errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from ..models import SingleRunModel


class Store(store.Store):
    """The depthlab store at ``root`` (default ``$DEPTHLAB_STORE``, else ``./depthlab-runs``).

    A missing store is a :class:`depthlab.store.StoreError` unless ``create`` (a mistyped path must not read as
    "no runs"); :func:`depthlab.train` and :func:`depthlab.sweep` create one.
    """

    def __init__(self, root: str | Path | None = None, create: bool = False) -> None:
        root = Path(root).expanduser().absolute() if root is not None else store.default_store_path()
        if not create and not store.database_path(root).is_file():
            raise store.StoreError(f"no depthlab store at {root} (depthlab.train or depthlab.sweep with "
                                   f"store={str(root)!r} trains runs into one)")
        super().__init__(root, create=create)

    def runs(self, status: str | None = None, task: str | None = None) -> pd.DataFrame:
        """One row per run (oldest first; only ``status`` / ``task`` ones when given): ``id``, ``status``,
        ``task``, ``model``, ``step``, ``created``, ``updated``, ``error``, ``cell`` (equal for the runs whose
        configs differ only in the seed: group by it to pool seeds), every config field as a dotted column
        (``model.layers``, ``task.k``, ``train.lr``, ``seed``), then the final metrics (``accuracy``, ``loss``,
        ``steps``, ``chance`` …; NaN where a run has none). See :mod:`depthlab.api.tables` for the dtypes."""
        from .tables import runs_frame

        return runs_frame(self.find_runs(status=status, task=task))

    def metrics(self, run_ids: str | Sequence[str] | None = None) -> pd.DataFrame:
        """Every metrics row of ``run_ids`` (one id, several, or None for every run) in long form:
        ``run_id``, ``step``, ``split`` (train, eval), ``metric`` (loss, accuracy, …), ``value``.

        Pivot it as you like: ``df.pivot_table(index="step", columns=["split", "metric"], values="value")``.
        (One run's metrics as lists per split: :meth:`depthlab.store.Store.metric_columns`.)"""
        from .tables import metrics_frame

        ids = [run_ids] if isinstance(run_ids, str) else run_ids
        return metrics_frame(self.metric_rows(None if ids is None else [self.resolve(i) for i in ids]))

    def load_model(self, run_id: str, step: int | None = None, requires_grad: bool = True) -> SingleRunModel:
        """The trained model of one run (its id or a unique prefix), in eval mode, without the run axis: inputs
        ``[batch, n]`` or text in the task's vocabulary, logits ``[batch, C]`` (``read="all"``: at every position),
        TransformerLens parameter names, ``cfg``, tokenizer calls and hook points (``run_with_cache``,
        ``run_with_hooks``, ``add_hook``; :class:`depthlab.models.SingleRunModel`); ``model.task`` is the run's task.

        ``step``: None for the run's last checkpoint; else a step whose weights the run kept
        (``train.keep_checkpoints``: ``history/step-NNNNNNN.safetensors``) or the last checkpoint's step.
        Its parameters take gradients (train it on, or differentiate through it) unless ``requires_grad=False``.
        """
        from ..analysis.emergence import history, load_weights
        from ..analysis.runs import load_run
        from ..models import SingleRunModel

        run = load_run(self, self.resolve(run_id), requires_grad)
        if step is not None and step != run.step:
            kept = dict(history(self, run.id))
            if step not in kept:
                steps = ", ".join(str(s) for s in sorted({*kept, run.step}))
                raise UserError(f"step {step}: run {run.id} has weights at steps {steps} (train.keep_checkpoints "
                                f"keeps every checkpoint's)")
            load_weights(run.model, kept[step], run)
        return SingleRunModel(run.model, run.task)
