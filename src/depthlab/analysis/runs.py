"""A finished run back from the store: its config, its trained model, and its attention maps.

``load_run`` rebuilds the model exactly as the engine built it (``models.build_model`` from the run's config)
for one run (R = 1), then loads the run's checkpoint (safetensors, never
pickle; the optimizer state is dropped). ``attention_maps`` runs chosen examples through it with
``capture=True`` and returns every layer's and head's pattern with the tokens that label its axes.

``select_runs`` (``iter_selected``: a page at a time) reads the ``--runs`` filter of the commands that read the
store (report, analyses).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..bounded import BoundError, parse_yaml
from ..errors import UserError
from ..models import TaskShapes, build_model
from ..models.tokens import Vocabulary
from ..store import Store, StoreError
from ..tasks.base import Batch, Task
from ..training.evaluate import read_tensor
from ..training.footprint import check_sample

# Fields a --runs term may name directly (besides dotted config paths such as model.heads or task.k).
FILTER_FIELDS = ("id", "task", "model", "status", "tag", "layers", "seed", "group")


@dataclass
class LoadedRun:
    """A run rebuilt from the store: its record, validated config, task and trained model (one run, eval mode)."""

    id: str
    record: dict[str, Any]
    config: Any  # depthlab.config.RunConfig
    model: Any  # a models.RunModule with n_runs == 1
    step: int  # the step of the loaded checkpoint

    @property
    def task(self) -> Task:
        return self.config.task


def load_run(store: Store, run_id: str, requires_grad: bool = False) -> LoadedRun:
    """Rebuild ``run_id``'s trained model from its config and checkpoint (in eval mode; its parameters take
    gradients only with ``requires_grad``: the analyses read, they do not train); UserError when impossible."""
    from ..config import parse_run
    from ..training.checkpoint import CheckpointError, Owner, layout_of, load_checkpoint

    record = store.get_run(run_id)
    if record is None:
        raise StoreError(f"run {run_id!r}: no such run in store {store.root} (see `depthlab runs`)")
    try:
        config = parse_run(record["config"])
    except UserError as e:
        raise UserError(f"run {run_id}: its config does not load in this depthlab ({e})") from None
    try:
        owner = Owner(run_id, store.config_hash(record["config"]))  # as recorded, whatever this depthlab's defaults
        loaded = load_checkpoint(store.run_folder(run_id), owner, layout_of(config))
    except CheckpointError as e:
        raise UserError(f"run {run_id}: {e}") from None
    if loaded is None:
        raise UserError(f"run {run_id}: no checkpoint (status {record['status']}, step {record['step']})")
    tensors, meta = loaded
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model = build_model(config.model, TaskShapes.of(config.task), [config.seed])
    try:
        model.load_run_state_dict(0, weights)
    except ValueError as e:
        raise UserError(f"run {run_id}: {e}") from None
    model.eval().requires_grad_(requires_grad)
    return LoadedRun(run_id, record, config, model, int(meta.get("step", record["step"] or 0)))


# ----------------------------------------------------------------------------------------- examples


def sample_examples(task: Task, n: int, seed: int = 0, split: str = "eval", option: str = "-n") -> Batch:
    """``n`` examples of ``task`` drawn with a fixed seed: every run of the task sees the same ones. A number that
    cannot fit is refused (ResourceError) naming ``option``, the command-line option that asked for it."""
    check_sample(task, n, split, f"{option}: sampling {n:,} examples of {task.name}", f"lower {option}")
    return task.sample(n, np.random.default_rng(seed), split)


def encode_example(task: Task, text: str, option: str = "--example") -> Batch:
    """One example written as ``depthlab sample`` prints it (``a → 1 b → 2 a → _1``) as a Batch.

    Tokens are separated by spaces or written together (Dyck's ``()[]``), read as the model's ``to_tokens`` reads
    them (:class:`depthlab.models.tokens.Vocabulary`); ``->`` may stand for ``→``; a final ``_label`` gives the
    target (else the target is unknown, stored as -1). The input must have the task's length n. Mistakes are
    UserErrors naming ``option``.
    """
    if task.input_dim:
        raise UserError(f"{option}: {task.name} takes vector inputs; its examples cannot be written as tokens")
    pieces = text.split()
    target = -1
    if pieces and pieces[-1].startswith("_") and pieces[-1] not in task.vocab:
        label = pieces.pop()[1:]
        if label not in task.labels:
            raise UserError(f"{option}: unknown target {label!r}; allowed: {', '.join(task.labels)}")
        target = task.labels.index(label)
    vocabulary = Vocabulary(task.vocab, task.labels, task.name)
    try:
        tokens = vocabulary.split(" ".join(pieces))
    except ValueError as e:
        raise UserError(f"{option}: {e}") from None
    if len(tokens) != task.seq_len:
        raise UserError(f"{option}: {task.name} inputs have {task.seq_len} tokens, got {len(tokens)} in {text!r}")
    inputs = np.array([[vocabulary.index[t] for t in tokens]], dtype=np.int64)
    return Batch(inputs, np.array([target], dtype=np.int64))


def _target_text(task: Task, batch: Batch, i: int) -> str | None:
    """The target of example ``i`` as the task writes it, or None when unknown (an id of -1)."""
    t = batch.targets[i]
    if np.ndim(t) == 0 and np.issubdtype(batch.targets.dtype, np.integer) and int(t) < 0:
        return None
    return str(task.example_tokens(batch, i)[1])


def _tokens(task: Task, batch: Batch, i: int) -> list[str]:
    if task.input_dim:  # vector inputs: positions are the axes
        return [str(j) for j in range(batch.inputs.shape[1])]
    return [task.vocab[t] for t in batch.inputs[i]]


def _prediction(task: Task, output: torch.Tensor) -> str:
    """The model's answer for one example (output [C] or [P, C]) in the task's labels."""
    if task.loss == "mse":
        return " ".join(f"{v:.3g}" for v in output.reshape(-1).tolist())
    if task.loss.startswith("bce"):
        rows = output.reshape(-1, output.shape[-1])
        return " | ".join(",".join(task.labels[j] for j in (row > 0).nonzero().flatten().tolist()) or "∅"
                          for row in rows)
    return " ".join(task.labels[j] for j in output.argmax(-1).reshape(-1).tolist())


@torch.no_grad()
def attention_maps(run: LoadedRun, batch: Batch) -> list[dict[str, Any]]:
    """Every example of ``batch`` through ``run``'s model with its attention captured.

    One dict per example: ``tokens`` (input token strings, the axes: query rows, key columns; positions for
    vector inputs), ``target`` and ``prediction`` (as the task writes labels; target None when unknown),
    ``correct`` (as the engine scores it; None when the target is unknown or the task has no accuracy),
    ``text`` (the example in seed 001 Table 1 notation) and ``layers``: per layer a float array [heads, q, k].
    """
    from ..training.objectives import per_run_correct

    task = run.task
    out = run.model(torch.from_numpy(batch.inputs)[None], capture=True, read=read_tensor(task))
    patterns = [p[0].float().numpy() for p in out.attentions]  # per layer [B, heads, q, k]
    examples = []
    for i in range(len(batch)):
        tokens = _tokens(task, batch, i)
        target = _target_text(task, batch, i)
        correct = None
        if target is not None:
            hits = per_run_correct(out.outputs[:, i : i + 1], torch.from_numpy(batch.targets[i : i + 1])[None],
                                   task.loss, task.accuracy_over)
            correct = None if hits is None else bool(hits[0] >= 1)
        examples.append({
            "tokens": tokens,
            "target": target,
            "prediction": _prediction(task, out.outputs[0, i]),
            "correct": correct,
            "text": task.decode(batch, i) if target is not None else " ".join(tokens),
            "layers": [p[i] for p in patterns],
        })
    return examples


# ------------------------------------------------------------------------------------------- filter


def _parse_value(text: str) -> Any:
    try:
        return parse_yaml(text, "--runs")
    except BoundError:
        return text


def _same(actual: Any, wanted: str) -> bool:
    if isinstance(actual, list | tuple):
        return any(_same(a, wanted) for a in actual) or str(list(actual)) == wanted.replace(" ", "")
    if str(actual) == wanted:
        return True
    value = _parse_value(wanted)
    if isinstance(actual, bool) or isinstance(value, bool):
        return actual is value
    if isinstance(actual, int | float) and isinstance(value, int | float):
        return math.isclose(float(actual), float(value))
    return False


def _field(run: dict[str, Any], name: str) -> Any:
    config = run["config"] or {}
    direct = {"id": run["id"], "task": run["task"], "model": run["model"], "status": run["status"],
              "tag": run["tags"], "layers": (config.get("model") or {}).get("layers"), "seed": config.get("seed"),
              "group": run["group_id"]}
    if name in direct:
        return direct[name]
    node: Any = config
    for key in name.split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


_MISSING = object()


def parse_filter(text: str | None) -> list[tuple[str, list[str]]]:
    """``--runs`` as (field, allowed values) pairs. Terms are comma-separated ``field=value``; a bare term is a
    run id or id prefix; ``|`` separates alternatives (``task=icqa|template``); repeated fields add alternatives.
    """
    terms: dict[str, list[str]] = {}
    for raw in (text or "").split(","):
        term = raw.strip()
        if not term:
            continue
        field, sep, value = term.partition("=")
        if not sep:
            field, value = "id", term
        field, value = field.strip(), value.strip()
        if not field or not value:
            raise UserError(f"--runs: cannot read {term!r}; write field=value terms, e.g. task=icqa,layers=2")
        if field not in FILTER_FIELDS and not field.startswith(("task.", "model.", "train.")):
            raise UserError(f"--runs: unknown field {field!r}; allowed: {', '.join(FILTER_FIELDS)}, "
                            f"or a config field such as model.heads, task.k, train.lr")
        terms.setdefault(field, []).extend(v.strip() for v in value.split("|") if v.strip())
    return list(terms.items())


def iter_selected(store: Store, text: str | None = None) -> Iterator[dict[str, Any]]:
    """The store's runs matching the ``--runs`` filter (every run when it is empty), oldest first, read a page at a
    time: what a report of 100,000 runs streams through (each run with its ``cell_text``: ``Store.iter_runs``)."""
    terms = parse_filter(text)
    for run in store.iter_runs(cells=True):
        if all(_matches(run, field, values) for field, values in terms):
            yield run


def _matches(run: dict[str, Any], field: str, values: list[str]) -> bool:
    if field == "id":
        return any(run["id"].startswith(v) for v in values)
    return (actual := _field(run, field)) is not _MISSING and any(_same(actual, v) for v in values)


def select_runs(store: Store, text: str | None = None) -> list[dict[str, Any]]:
    """The store's runs matching the ``--runs`` filter (every run when it is empty), oldest first."""
    return list(iter_selected(store, text))


def is_trained(record: dict[str, Any]) -> bool:
    """Whether a store record is a run the engine trained (its config has a task and a model section): an
    ``llm-bench`` run has neither, so the analyses of trained runs leave it out."""
    config = record.get("config") or {}
    return isinstance(config.get("task"), dict) and isinstance(config.get("model"), dict)
