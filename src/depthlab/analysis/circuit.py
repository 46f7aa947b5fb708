"""Circuits: attention paths named by role, their validation by ablation (seed 002 Appendix E), and their discovery.

A circuit file (YAML) lists attention paths — a head and the roles of the attending (``from``) and attended
(``to``) positions of the same chain — and says what the rest of the model does::

    paths:
      - {head: "0.0", from: "second of pair {k}", to: "first of pair {k}"}   # {k}: every pair (also {k+1}, {k-1})
      - {head: "2.0", from: query, to: "second of pair 1"}
    off_circuit: uniform   # heads with no path: uniform | identity | previous
    rest: identity         # rows of a circuit head that no path starts from: identity | uniform | recorded
    heads: {"3.0": identity}  # optional: another pattern for some off-circuit heads

Validation (seed 002 Appendix E, steps 5 and 6): "performing combined ablations on all heads and measuring the
validation loss" — every off-circuit head replaced, every circuit head one-hot on its paths — then "attempting
to further ablate all attention paths individually": each path's rows alone get uniform attention, and the
rise of the loss says whether the path is needed.

Discovery automates the seed's manual procedure (Appendix E, steps 1-4): the mean attention between every pair
of roles of every head (the "role attention"); every head's strongest role-to-role link above a threshold
becomes a candidate path; the candidates are ablated together (off-circuit heads uniform or identity, whichever
keeps the loss lower) and then pruned one by one, weakest first, while the loss stays acceptable. Appendix E,
step 3: "I choose the simplest mechanism that maintains a low validation loss (below 0.05) after ablation" —
``accept="below"``: the pruned circuit's loss must stay below ``tolerance`` (0.05), the seed's criterion, which
only models whose intact loss is under it can meet (the seed's reach MSE < 0.01, §8.2); ``accept="within"``
(depthlab's, for the quick scales' less trained models): within ``tolerance`` of the intact model's loss (or of
the candidates' own loss, 5 % and 0.005 above it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import numpy as np
import torch
import yaml

from ..bounded import MAX_TEXT_BYTES, BoundError, parse_yaml, read_file
from ..errors import UserError
from ..tasks.base import Batch, Task
from .ablation import (
    HeadPattern,
    all_heads,
    capture,
    head_name,
    parse_head,
    parse_role,
    score,
    task_roles,
)

OFF_KINDS = ("uniform", "identity", "previous")
REST_KINDS = ("identity", "uniform", "recorded")


@dataclass(frozen=True)
class Path:
    layer: int
    head: int
    src: str  # role of the attending position
    dst: str  # role of the attended position

    @property
    def label(self) -> str:
        return f"{self.layer}.{self.head} {self.src} → {self.dst}"

    def to_dict(self) -> dict[str, Any]:
        return {"head": f"{self.layer}.{self.head}", "from": self.src, "to": self.dst}


@dataclass
class Circuit:
    paths: list[Path]
    off_circuit: str = "uniform"
    rest: str = "identity"
    heads: dict[tuple[int, int], str] = field(default_factory=dict)  # off-circuit exceptions

    @property
    def circuit_heads(self) -> list[tuple[int, int]]:
        return list(dict.fromkeys((p.layer, p.head) for p in self.paths))

    def patterns(self, model: Any, drop: int | None = None) -> dict[tuple[int, int], HeadPattern]:
        """Every head's replacement: one-hot on its paths (path ``drop`` uniform instead), or off-circuit."""
        out: dict[tuple[int, int], HeadPattern] = {}
        for head in all_heads(model):
            mine = [(i, p) for i, p in enumerate(self.paths) if (p.layer, p.head) == head]
            if mine:
                dropped = frozenset(j for j, (i, _) in enumerate(mine) if i == drop)
                out[head] = HeadPattern("onehot", [(p.src, p.dst) for _, p in mine], self.rest, dropped)
            else:
                out[head] = HeadPattern(self.heads.get(head, self.off_circuit))
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"paths": [p.to_dict() for p in self.paths], "off_circuit": self.off_circuit,
                               "rest": self.rest}
        if self.heads:
            out["heads"] = {head_name(h): k for h, k in self.heads.items()}
        return out

    def dump(self, path: FilePath, comment: str = "") -> FilePath:
        text = "".join(f"# {line}\n" for line in comment.splitlines()) + yaml.safe_dump(
            self.to_dict(), sort_keys=False, allow_unicode=True, width=120)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path


# ------------------------------------------------------------------------------------------ circuit files

_TEMPLATE = re.compile(r"\{k([+-]\d+)?\}")


def _numbers(roles: list[str]) -> list[int]:
    return sorted({int(x) for r in roles for x in re.findall(r"\d+", r)})


def _expand(text: str, k: int) -> str:
    return _TEMPLATE.sub(lambda m: str(k + int(m.group(1) or 0)), text)


def parse_circuit(raw: Any, model: Any, task: Task, where: str = "circuit") -> Circuit:
    """A circuit mapping (see the module doc) checked against the model and the task; UserError otherwise."""
    if not isinstance(raw, dict) or not isinstance(raw.get("paths"), list):
        raise UserError(f"{where}: must be a mapping with a list `paths` of {{head, from, to}}")
    allowed = task_roles(task)
    unknown = sorted(set(raw) - {"paths", "off_circuit", "rest", "heads", "name", "note"})
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: unknown field; allowed: paths, off_circuit, rest, heads")
    paths: list[Path] = []
    for i, item in enumerate(raw["paths"]):
        loc = f"{where}.paths[{i}]"
        if not isinstance(item, dict) or not {"from", "to"} <= set(item) or not ("head" in item or "layer" in item):
            raise UserError(f"{loc}: write {{head: L.H, from: ROLE, to: ROLE}}")
        head_text = f"{item['layer']}.{item.get('head', 0)}" if "layer" in item else str(item["head"])
        layer, head = parse_head(head_text, model)
        src, dst = str(item["from"]), str(item["to"])
        if _TEMPLATE.search(src + dst):
            ks = item.get("k", "all")
            ks = _numbers(allowed) if ks == "all" else ks if isinstance(ks, list) else [ks]
            pairs = [(_expand(src, k), _expand(dst, k)) for k in ks]
            pairs = [(a, b) for a, b in pairs if _known(task, a) and _known(task, b)]
            if not pairs:
                raise UserError(f"{loc}: no value of k gives roles of this task; allowed: {', '.join(allowed)}")
        else:
            pairs = [(src, dst)]
        for a, b in pairs:
            try:
                paths.append(Path(layer, head, parse_role(task, a), parse_role(task, b)))
            except UserError as e:
                raise UserError(f"{loc}: {e}") from None
    off = raw.get("off_circuit", "uniform")
    rest = raw.get("rest", "identity")
    if off not in OFF_KINDS:
        raise UserError(f"{where}.off_circuit: unknown pattern {off!r}; allowed: {', '.join(OFF_KINDS)}")
    if rest not in REST_KINDS:
        raise UserError(f"{where}.rest: unknown pattern {rest!r}; allowed: {', '.join(REST_KINDS)}")
    heads = {}
    for key, kind in (raw.get("heads") or {}).items():
        if kind not in OFF_KINDS:
            raise UserError(f"{where}.heads.{key}: unknown pattern {kind!r}; allowed: {', '.join(OFF_KINDS)}")
        heads[parse_head(str(key), model)] = kind
    return Circuit(list(dict.fromkeys(paths)), off, rest, heads)


def _known(task: Task, role: str) -> bool:
    try:
        parse_role(task, role)
        return True
    except UserError:
        return False


def load_circuit(path: FilePath, model: Any, task: Task) -> Circuit:
    data = read_file(path, MAX_TEXT_BYTES, "circuit")  # a regular file of at most 1 MiB, else one line
    try:
        raw = parse_yaml(data.decode("utf-8"), "circuit")
    except UnicodeDecodeError:
        raise UserError(f"circuit: {path} is not a text file (not UTF-8); a circuit is YAML text") from None
    except BoundError as e:
        raise UserError(f"circuit: {path} is {e.detail}") from None
    return parse_circuit(raw, model, task, where=str(path))


# ------------------------------------------------------------------------------------------ role attention


def role_positions(task: Task, batch: Batch) -> tuple[list[str], np.ndarray]:
    """The task's roles and their positions stacked: [roles, B, P]."""
    names = task_roles(task)
    roles = task.roles(batch)
    return names, np.stack([roles[r] for r in names])


def role_attention(patterns: list[torch.Tensor], task: Task, batch: Batch) -> np.ndarray:
    """Mean attention from every role to every role of the same chain, per head: [layers, heads, roles, roles].

    ``patterns``: each layer's captured pattern [1, B, heads, n, n].
    """
    _, pos = role_positions(task, batch)
    at = pos.transpose(1, 2, 0)  # [B, P, roles]
    b = np.arange(len(batch))[:, None, None]
    out = []
    for layer in patterns:
        p = layer[0].numpy()  # [B, H, n, n]
        rows = p[b, :, at, :]  # [B, P, roles_from, H, n]
        cols = np.take_along_axis(rows, at[:, :, None, None, :], axis=-1)  # [B, P, roles_from, H, roles_to]
        out.append(cols.mean(axis=(0, 1)).transpose(1, 0, 2))  # [H, roles_from, roles_to]
    return np.stack(out)


def path_attention(patterns: list[torch.Tensor], task: Task, batch: Batch, paths: list[Path]) -> list[float]:
    """Mean attention on each path over the examples and read-outs of ``batch``."""
    roles = task.roles(batch)
    b = np.arange(len(batch))[:, None]
    out = []
    for p in paths:
        pattern = patterns[p.layer][0, :, p.head].numpy()  # [B, n, n]
        out.append(float(pattern[b, roles[p.src], roles[p.dst]].mean()))
    return out


# ------------------------------------------------------------------------------------------ validation


def validate(model: Any, task: Task, batch: Batch, circuit: Circuit) -> dict[str, Any]:
    """Appendix E steps 5-6: the loss with the whole model reduced to the circuit, then with each path dropped."""
    if not circuit.paths:
        raise UserError("circuit: it has no paths")
    intact = score(model, task, batch)
    reduced = score(model, task, batch, circuit.patterns(model))
    attention = path_attention(capture(model, batch), task, batch, circuit.paths)
    paths = []
    for i, p in enumerate(circuit.paths):
        dropped = score(model, task, batch, circuit.patterns(model, drop=i))
        paths.append({**p.to_dict(), "path": p.label, "attention": attention[i], "loss_without": dropped["loss"],
                      "rise": dropped["loss"] - reduced["loss"],
                      "partial_losses_without": dropped["partial_losses"]})
    off = [head_name(h) for h in all_heads(model) if h not in circuit.circuit_heads]
    return {"intact": intact, "circuit": reduced, "rise": reduced["loss"] - intact["loss"], "paths": paths,
            "circuit_heads": [head_name(h) for h in circuit.circuit_heads], "off_circuit_heads": off,
            "off_circuit": circuit.off_circuit, "rest": circuit.rest}


# ------------------------------------------------------------------------------------------ discovery


ACCEPT = ("within", "below")


def discover(model: Any, task: Task, batch: Batch, threshold: float = 0.3, tolerance: float = 0.05,
             accept: str = "within") -> tuple[Circuit, dict[str, Any]]:
    """A circuit for ``model`` found by ablation (see the module doc) and the log of how it was found
    (``meets_criterion``: whether the circuit's loss is acceptable under ``accept``)."""
    if accept not in ACCEPT:
        raise UserError(f"--accept: must be one of {', '.join(ACCEPT)} (got {accept!r})")
    names = task_roles(task)
    patterns = capture(model, batch)
    attention = role_attention(patterns, task, batch)
    candidates: list[tuple[float, Path]] = []
    for layer, head in all_heads(model):
        a = attention[layer, head].copy()
        np.fill_diagonal(a, -1.0)  # attending to one's own role is what off-path rows do anyway
        for i, src in enumerate(names):
            j = int(a[i].argmax())
            if a[i, j] >= threshold:
                candidates.append((float(a[i, j]), Path(layer, head, src, names[j])))
    intact = score(model, task, batch)["loss"]
    log: dict[str, Any] = {"intact_loss": intact, "threshold": threshold, "tolerance": tolerance,
                           "accept": accept, "candidates": len(candidates)}
    if not candidates:
        log["note"] = "no head attends between roles above the threshold"
        return Circuit([]), log
    trials = {}
    for off in ("uniform", "identity"):
        trials[off] = score(model, task, batch, Circuit([p for _, p in candidates], off).patterns(model))["loss"]
    off = min(trials, key=trials.get)
    log["off_circuit_trials"] = trials
    current = Circuit([p for _, p in sorted(candidates, key=lambda c: -c[0])], off)
    loss = trials[off]
    limit = tolerance if accept == "below" else max(intact + tolerance, loss * 1.05 + 0.005)
    log["limit"] = limit
    for _, path in sorted(candidates, key=lambda c: c[0]):  # weakest first
        if len(current.paths) == 1:
            break
        trial = Circuit([p for p in current.paths if p != path], off)
        trial_loss = score(model, task, batch, trial.patterns(model))["loss"]
        if trial_loss <= limit:
            current, loss = trial, trial_loss
    current.paths.sort(key=lambda p: (p.layer, p.head, names.index(p.src)))
    log["circuit_loss"] = loss
    log["meets_criterion"] = bool(loss <= limit)
    log["paths"] = len(current.paths)
    return current, log
