"""A group's memory, estimated before it is built, and refused when the machine cannot hold it.

For the R runs of a group, in bytes (what each run adds, and what the runs share):

- parameters and optimizer: P × 4 × (weights, gradients twice — autograd's and the optimizer's buffer they are
  gathered into — and optimizer states: AdamW 2, SGD with momentum 1) per run, P counted exactly
  (``models.model_size``), and the buffers the runs share;
- activations: a training step keeps for the backward pass at least one float per unit of width, position and
  layer of each example, and the logits it reads (a lower bound: the families keep 1.5 to 100 times that);
- scan: for the families whose spec says what a training step's blocks hold (``training_floats``: Mamba's
  selective scan in blocks and its layers' activations; DSS's FFT convolution and kernel), that, measured;
- training data: each run holds its current chunk, the one sampled ahead (``data.DataStream``) and the group's
  copy of its current chunk on the device (``data.GroupBatches``), and two chunks may be sampled at once (one
  when chunks are too big to sample ahead), each at its peak (measured: ``tasks.sizes``);
- evaluation set: the examples every run is scored on (``data.eval_set``), at the peak of generating them.

On the CPU every part is checked against the host's budget (``depthlab.memory``). On a GPU the parts that live
there (``ON_DEVICE``) are checked against the GPU's free memory, the others against the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig
from ..errors import ResourceError
from ..memory import format_bytes, memory_budget, require_memory
from ..models import ModelSize, TaskShapes, model_size
from ..tasks import Task
from ..tasks.sizes import SampleCost, sample_cost
from .data import CHUNK_EXAMPLES, EXHAUSTIVE_EVAL_LIMIT, PREFETCH_BYTES, SAMPLED_EVAL_EXAMPLES
from .device import gpu_free_for, trains_on_gpu
from .evaluate import eval_chunk

FLOAT = 4  # bytes of a float32: weights, gradients, optimizer states and activations
EVAL_PASS = "evaluation pass"
# the parts that live on a GPU when the group trains there; the rest are the host's
ON_DEVICE = frozenset({"parameters and optimizer", "activations", "scan", "model buffers", EVAL_PASS})
_MODEL_SIZES: dict[tuple[str, str, str], ModelSize] = {}


@dataclass(frozen=True)
class Footprint:
    """Bytes by part: ``per_run`` for each run of the group, ``shared`` once, and the evaluation pass:
    ``eval_example`` bytes per example and run, for as many examples at once as ``evaluate.eval_chunk`` takes
    for the group (fewer for more runs or longer sequences of ``seq_len`` positions)."""

    per_run: dict[str, int]
    shared: dict[str, int]
    eval_example: int = 0
    seq_len: int = 1

    def parts(self, runs: int) -> dict[str, int]:
        """Bytes by part for a group of ``runs`` runs."""
        evaluation = runs * eval_chunk(runs, self.seq_len) * self.eval_example
        return {**{k: v * runs for k, v in self.per_run.items()}, **self.shared, EVAL_PASS: evaluation}

    def total(self, runs: int) -> int:
        return sum(self.parts(runs).values())

    def runs_that_fit(self, budget: int) -> int:
        """The most runs whose group stays within ``budget`` bytes (0: not even one)."""
        low, high = 0, max(budget - sum(self.shared.values()), 0) // max(sum(self.per_run.values()), 1)
        while low < high:  # the evaluation pass grows with the runs until its chunk shrinks: searched
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.total(middle) <= budget else (low, middle - 1)
        return low

    def only(self, parts: frozenset[str], keep: bool = True) -> Footprint:
        """The footprint of the parts named in ``parts`` (or of the others, ``keep=False``)."""
        return Footprint({k: v for k, v in self.per_run.items() if (k in parts) == keep},
                         {k: v for k, v in self.shared.items() if (k in parts) == keep},
                         self.eval_example if (EVAL_PASS in parts) == keep else 0, self.seq_len)


def _model_size(config: RunConfig) -> ModelSize:
    key = (config.task.name, config.task.model_dump_json(), config.model.model_dump_json())
    if key not in _MODEL_SIZES:
        try:
            _MODEL_SIZES[key] = model_size(config.model, TaskShapes.of(config.task))
        except RuntimeError as e:  # sizes whose element counts overflow PyTorch's int64 arithmetic
            if "overflow" not in str(e):
                raise
            raise ResourceError(f"memory: {config.model.name} with these sizes has tensors past PyTorch's size "
                                f"limit ({' '.join(str(e).split())[:120]}); lower the model's sizes") from None
    return _MODEL_SIZES[key]


def _eval_examples(config: RunConfig) -> int:
    """How many examples ``data.eval_set`` builds for this task."""
    size = config.task.dataset_size("eval")
    return size if size <= EXHAUSTIVE_EVAL_LIMIT else SAMPLED_EVAL_EXAMPLES


def footprint(config: RunConfig) -> Footprint:
    """The memory of a group of runs like ``config`` (its task, model and training settings)."""
    task, train = config.task, config.train
    size = _model_size(config)
    states = {"adamw": 2, "sgd": 1 if train.momentum else 0}[train.optimizer]
    read = len(task.read_positions or [0])
    activations = train.batch_size * (task.seq_len * getattr(config.model, "layers", 1) * size.width
                                      + read * task.n_outputs)
    none = SampleCost(0, 0, 0)
    cost = sample_cost(task, "train") or none
    chunk = max(1, CHUNK_EXAMPLES // train.batch_size) * train.batch_size
    held = 2 if chunk * cost.kept <= PREFETCH_BYTES else 1  # the next chunk is sampled ahead only when small
    evaluation = sample_cost(task, "eval") or cost
    blocks = getattr(config.model, "training_floats", None)
    scan = {"scan": blocks(task.seq_len, train.batch_size, trains_on_gpu(train.device)) * FLOAT} if blocks else {}
    return Footprint(
        per_run={"parameters and optimizer": size.parameters * FLOAT * (3 + states),
                 "activations": activations * FLOAT, **scan, "training data": (held + 1) * chunk * cost.kept},
        shared={"model buffers": size.buffers * FLOAT, "sampling": held * cost.bytes(chunk),
                "evaluation set": evaluation.bytes(_eval_examples(config))},
        # a layer's residual stream, and the logits with their log-softmax (a task of 3,000,000 labels: 98 GB)
        eval_example=(task.seq_len * size.width + 2 * read * task.n_outputs) * FLOAT, seq_len=task.seq_len)


def check_group(configs: list[RunConfig]) -> None:
    """ResourceError when the group of ``configs`` (runs of equal shapes) needs more memory than the budget."""
    if configs:
        check_runs(configs[0], len(configs))


def check_runs(config: RunConfig, runs: int, fix: str | None = None) -> None:
    """ResourceError when ``runs`` runs shaped as ``config``, trained as one group, need more memory than the
    budget (on a GPU: the parts that live there, more than it has free); checked from the one config, before the
    others are built. ``fix``: what to lower (default: the task's or model's sizes, or the group's size)."""
    fp = footprint(config)
    budget, _ = memory_budget()
    if budget is None:  # DEPTHLAB_MEMORY=off: nothing is checked
        return
    gpu = trains_on_gpu(config.train.device)
    host = fp.only(ON_DEVICE, keep=False) if gpu else fp
    if host.total(runs) > budget:
        need, detail, what_to_do = _shortfall(config, host, runs, budget, fix)
        require_memory(need, _group(config, runs), what_to_do, detail)
    on_gpu = gpu_free_for(config.train.device)
    if on_gpu is None:
        return
    where, free = on_gpu
    device = fp.only(ON_DEVICE)
    if device.total(runs) > free:
        need, detail, what_to_do = _shortfall(config, device, runs, free, fix)
        raise ResourceError(f"{_group(config, runs)} needs about {format_bytes(need)} on {where} ({detail}), more "
                            f"than the {format_bytes(free)} free there; {what_to_do}")


def _group(config: RunConfig, runs: int) -> str:
    group = f"a group of {runs} runs" if runs > 1 else "a run"
    return f"memory: {group} of {config.task.name} with {config.model.name}"


def _shortfall(config: RunConfig, fp: Footprint, runs: int, budget: int, fix: str | None) -> tuple[int, str, str]:
    """For ``runs`` runs of ``fp`` over ``budget`` bytes: the bytes they need, the parts of 1 MiB or more, and
    what to lower (``fix``, or by default the sizes or the group's size), with how many runs would fit."""
    parts, need = fp.parts(runs), fp.total(runs)
    detail = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items() if v >= 1 << 20)
    if parts[EVAL_PASS] > need // 2:  # the task's outputs: said by their number, the field that sets them
        examples = eval_chunk(runs, fp.seq_len)
        detail += (f"; the evaluation pass scores {examples:,} examples at a time against "
                   f"{config.task.n_outputs:,} outputs of {config.task.name}")
    fits = fp.runs_that_fit(budget)
    if fix is None:
        fix = "lower the task's or the model's sizes (or train.batch_size)"
        if 1 <= fits < runs:
            fix += f", or train at most {fits} runs at once (--group-size {fits})"
    elif 1 <= fits < runs:
        fix += f" (at most {fits} fit)"
    return need, detail, fix


def check_sample(task: Task, n: int, split: str, what: str, fix: str, per_example: int = 0) -> None:
    """ResourceError when sampling ``n`` examples of ``task`` (and ``per_example`` more bytes for each, e.g. their
    text) needs more memory than the budget; ``what`` and ``fix`` as in :func:`depthlab.memory.require_memory`."""
    cost = sample_cost(task, split)
    if cost is not None:
        require_memory(cost.bytes(n) + n * per_example, what, fix)
