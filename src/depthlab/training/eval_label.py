"""What a run's final evaluation measured, said from what it did: exhaustive, held-out or sampled, with the count.

A task's ``eval_protocol`` says where its evaluation data comes from; whether the final evaluation covered all of
it is decided when the evaluation set is built (``data.eval_set``: the whole dataset when it is at most
``EXHAUSTIVE_EVAL_LIMIT`` examples, else a fixed sample). The label is made from that outcome, so seed 001's
paper-scale IC-QA (1.6·10¹² questions, scored on 20,000 drawn from them) reads "sampled: 20,000 examples", never
"exhaustive" (issue 43).
"""

from __future__ import annotations

from typing import Any

from ..tasks import Task

KINDS = ("exhaustive", "held-out", "sampled")


def eval_kind(exhaustive: bool, held_out: bool) -> str:
    """``exhaustive`` (every example of the evaluation split), else ``held-out`` (a sample of a split kept out of
    training) or ``sampled`` (a sample of the task's distribution)."""
    return "exhaustive" if exhaustive else "held-out" if held_out else "sampled"


def eval_label(kind: str, examples: int, protocol: str | None, held_out: bool = False) -> str:
    """``exhaustive: all 338,688 examples — the task's dataset``; ``sampled: 20,000 examples — …``."""
    count = (f"all {examples:,} {'held-out ' if held_out else ''}examples" if kind == "exhaustive"
             else f"{examples:,} sampled examples" if kind == "held-out" else f"{examples:,} examples")
    return f"{kind}: {count}" + (f" — {protocol}" if protocol else "")


def final_eval_fields(task: Task, examples: int, exhaustive: bool) -> dict[str, Any]:
    """The final metrics' record of the evaluation: ``eval_kind``, ``eval_examples``, ``exhaustive`` and the
    one-line ``eval_protocol`` every table and caption shows. ``exhaustive`` (the whole evaluation split was
    scored) counts as exhaustive only where that split is not itself a sample of the inputs (seed 003's fixed
    ``eval_size`` strings are: all 5,000 of them scored is a sample of 5,000)."""
    exhaustive = exhaustive and not task.eval_split_is_sample
    held_out = task.held_out
    kind = eval_kind(exhaustive, held_out)
    return {"eval_kind": kind, "eval_examples": examples, "exhaustive": exhaustive,
            "eval_protocol": eval_label(kind, examples, task.eval_protocol, held_out)}


def protocol_of(final: dict[str, Any]) -> str | None:
    """A stored run's evaluation label: the one it recorded, or for a run recorded before ``eval_kind`` existed, one
    made from its ``exhaustive`` flag and count (its old text said "exhaustive dataset" even for a sample: that
    text is dropped then)."""
    if not final:
        return None
    if final.get("eval_kind"):
        return final.get("eval_protocol")
    protocol, examples, exhaustive = final.get("eval_protocol"), final.get("eval_examples"), final.get("exhaustive")
    if examples is None or exhaustive is None:
        return protocol
    if not exhaustive and protocol and "exhaustive" in protocol:
        protocol = None
    return eval_label("exhaustive" if exhaustive else "sampled", int(examples), protocol)
