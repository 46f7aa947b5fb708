"""Seed 001 Figure 3 (§6.2): a trained model's attention maps next to those of the paper's construction.

§6.2: "we analyze the attention maps for some typical examples. The results show that trained transformers exhibit
similar mechanisms to our constructions. In the reasoning task, we observe operations […] similar to the
constructed copying-matching mechanism […] two 'copying' operations […] in the first layer […]. In the second
layer, we can then identify a 'matching' operation". Figure 3's sequences are "A=1B=2A=" and, as the text reads
the second example (token "B" copied to the last position, the answer "2"), "A=1B=2B=": here ``a → 1 b → 2 a →``
and ``a → 1 b → 2 b →`` in seed 001 Table 1's notation (tasks with k = 2 and at least 3 answers).

§6.2 on templates: "In the template matching task, we also find evidence of our constructed parsing-mapping
mechanism […] a 'parsing' operation that checks the similarity of tokens in other positions can be observed in the
first layer: for input sequence 'AAB=', the repeat token 'A' in positions 0 and 1 share attention with each other,
for the input 'ABB=', the repeat token in positions 1 and 2 share the position information." Template tasks with
l = 3 show those two sequences (``a a b →`` and ``a b b →``, labelled with their templates' classes); other tasks
show their first evaluation examples.

The constructed model is the theorem's, hand-set (``depthlab.constructions.attention_only``: §13.2 for IC-QA,
§14.2 for template matching, §15 for IC-TM, §7 for nested IC-QA), run on the same examples. How close a trained
layer is to its constructed counterpart is measured as the *share on the construction*: the fraction of the
layer's attention (summed over heads) that falls where the constructed layer attends, over the whole map and on
the last row (the position the classifier reads), averaged over ``MEASURED`` evaluation examples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ..cells import group_cells, settings_text, varying_fields
from ..constructions import attention_only
from ..errors import UserError
from ..store import Store
from ..tasks.base import Batch, Task
from .runs import LoadedRun, attention_maps, encode_example, is_trained, load_run, sample_examples

FIGURE3_EXAMPLES = ("a → 1 b → 2 a → _1", "a → 1 b → 2 b → _2")
TEMPLATE_EXAMPLES = ((0, 0, 1), (0, 1, 1))  # §6.2's "AAB=" and "ABB=": symbols a, b as A, B
MEASURED = 256  # evaluation examples the shares are averaged over

CONSTRUCTED: dict[str, Callable[[Task], Any]] = {
    "icqa": attention_only.icqa_model,
    "template": attention_only.template_model,
    "ictm": attention_only.ictm_model,
    "nested_icqa": attention_only.nested_icqa_model,
}


def figure3_batch(task: Task) -> Batch:
    """Figure 3's two sequences (a UserError where ``task`` cannot write them)."""
    return Batch.concat([encode_example(task, text) for text in FIGURE3_EXAMPLES])


def template_batch(task: Task) -> Batch:
    """§6.2's template sequences "AAB=" and "ABB=" (a template task with l = 3), with their classes."""
    if task.name != "template" or task.l != 3 or task.n_symbols < 2:
        raise UserError(f"{task.name}: §6.2's sequences AAB= and ABB= need templates of length 3")
    seqs = np.array(TEMPLATE_EXAMPLES, dtype=np.int64)
    templates = task.space.template_of(seqs)
    inputs = np.concatenate([seqs, np.full((len(seqs), 1), task.sign_id, dtype=np.int64)], axis=1)
    return Batch(inputs, task.template_labels[templates], {"template": templates})


def section62_batch(task: Task) -> Batch:
    """The sequences §6.2 shows for ``task``: Figure 3's for IC-QA, "AAB=" and "ABB=" for templates of length 3,
    else the task's first two evaluation examples."""
    for build in (figure3_batch, template_batch):
        try:
            return build(task)
        except UserError:
            continue
    return sample_examples(task, 2)


def constructed_run(run: LoadedRun) -> LoadedRun:
    """The theorem's hand-set model for ``run``'s task, wrapped as a run (id ``construction``)."""
    if run.task.name not in CONSTRUCTED:
        raise UserError(f"run {run.id}: task {run.task.name} has no construction to compare with; "
                        f"allowed: {', '.join(CONSTRUCTED)}")
    try:
        model = CONSTRUCTED[run.task.name](run.task)
    except ValueError as e:
        raise UserError(f"run {run.id}: {e}") from None
    return LoadedRun("construction", {}, run.config, model, 0)


def _summed(example: dict[str, Any]) -> list[np.ndarray]:
    return [np.asarray(layer, dtype=float).sum(0) for layer in example["layers"]]


def construction_shares(trained: list[dict[str, Any]], built: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per layer, the mean share of the trained attention on the constructed pattern's support (whole map and
    last row); layers beyond the construction's depth are left out."""
    rows = []
    for layer in range(min(len(trained[0]["layers"]), len(built[0]["layers"]))):
        whole, last = [], []
        for t, b in zip(trained, built, strict=True):
            mine, support = _summed(t)[layer], _summed(b)[layer] > 0
            whole.append(mine[support].sum() / max(mine.sum(), 1e-12))
            last.append(mine[-1][support[-1]].sum() / max(mine[-1].sum(), 1e-12))
        rows.append({"layer": layer, "share": float(np.mean(whole)), "share_last_row": float(np.mean(last))})
    return rows


def compare_runs(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """For each model configuration among ``run_ids`` (its lowest seed that finished): the maps of Figure 3's
    examples, its accuracy, and its shares on the construction; then the construction's maps of the same examples.

    Returns ``{"task", "examples": [text …], "runs": [{"id", "label", "accuracy", "maps", "shares"}], "construction":
    {"maps"}}``; ``maps`` as :func:`depthlab.analysis.runs.attention_maps` returns them.
    """
    records = [r for r in (store.get_run(i) for i in run_ids) if r is not None and is_trained(r)]
    chosen = [min((r for r in runs if r["status"] == "done"), key=lambda r: r["config"]["seed"], default=None)
              for runs in group_cells(records)]
    chosen = [r for r in chosen if r is not None]
    fields = varying_fields([r["config"] for r in chosen])  # what tells the configurations apart
    if not chosen:
        raise UserError("attention: no finished run to draw (train the preset first)")
    tasks = {json.dumps(r["config"]["task"], sort_keys=True) for r in chosen}
    if len(tasks) > 1:
        raise UserError("attention: the runs must share one task config to be drawn against one construction")
    out: dict[str, Any] = {"runs": [], "task": chosen[0]["config"]["task"]["name"]}
    for record in chosen:
        run = load_run(store, record["id"])
        batch = section62_batch(run.task)
        measured = sample_examples(run.task, MEASURED, seed=1)
        built = constructed_run(run)
        out["examples"] = [run.task.decode(batch, i) for i in range(len(batch))]
        out["construction"] = {"maps": attention_maps(built, batch), "layers": built.model.layers,
                               "heads": built.model.spec.heads_per_layer}
        settings = settings_text(record["config"], fields)
        label = f"trained, {settings + ', ' if settings else ''}seed {record['config']['seed']}"
        out["runs"].append({
            "id": record["id"], "label": label,
            "accuracy": (record["final"] or {}).get("accuracy"), "maps": attention_maps(run, batch),
            "shares": construction_shares(attention_maps(run, measured), attention_maps(built, measured)),
        })
    return out
