"""depthlab from Python: train, read the store as pandas tables, load one run's model, reproduce a preset.

::

    import depthlab

    runs = depthlab.sweep("my-sweep.yaml", store="runs")          # [RunResult(id, status, metrics), …]
    df = depthlab.Store("runs").runs()                            # one row per run, config fields dotted
    df.groupby("cell")["accuracy"].agg(["mean", "std", "count"])  # a cell: the runs that differ only in the seed
    model = depthlab.Store("runs").load_model(runs[0].id)         # [batch, n] -> [batch, C], TransformerLens names
    logits, cache = model.run_with_cache(tokens)

Every name here is exported from ``depthlab`` itself (imported on first use, so ``import depthlab`` stays fast).
"""

from .atlas import atlas
from .catalog import list_models, list_tasks, task
from .reproduce import explain, plan, reproduce
from .store import Store
from .training import RunResult, sweep, train

__all__ = ["RunResult", "Store", "atlas", "explain", "list_models", "list_tasks", "plan", "reproduce", "sweep", "task",
           "train"]
