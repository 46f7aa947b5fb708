"""The cases of ``depthlab bench`` (issue 29, issue 45 item 4): what is trained, at which shapes, and the plain-loop
model an LSTM case is compared with.

The three original cases (``icqa-quick``, ``icqa-paper``, ``retrieval``) are the default; ``icqa-quick-stream2`` and
``retrieval-stream2`` are two of them with stream version 2's batches, made on the device. The family cases are
every model seed 003 trains at its index-lookup shapes (§6, App. H.1: alphabet 64, batch 64, Adam lr 1e-3): the
GPT-style transformer (1 layer, 4 heads, learned positions, as the preset's), the LSTM (1 layer) and the four other
recurrent families (2 layers; 4 heads where they have heads), at N = 100 and 400 and widths 64 and 256 — named
``<family>-n<N>-w<width>``; ``--case families`` selects all 24. Their plain loop is the same model class with one
run, except the LSTM's: ``torch.nn.LSTM`` itself (cuDNN on a GPU) between an ``nn.Embedding`` and the engine's
LSTM's read-out (``nn.LayerNorm``, ``nn.Linear``), one run at a time (:class:`TorchLSTM`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Case:
    name: str
    raw: dict[str, Any]
    note: str
    group: str = "default"  # "default": measured when no --case is given; "families": what --case families selects


CASES = [
    Case("icqa-quick", {
        "task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8},
        "model": {"name": "attention_only", "layers": 2, "heads": 1, "init": "random"},
        "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 64},
    }, "seed 001 IC-QA at the quick preset's sizes: d = 8 + 8 + 1, n = 11, d' = 28, 2 layers, batch 64"),
    Case("icqa-paper", {
        "task": {"name": "icqa", "k": 3, "n_q": 100, "n_a": 100},
        "model": {"name": "attention_only", "layers": 2, "heads": 1, "init": "random"},
        "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 64},
    }, "seed 001 IC-QA at the paper's sizes: d = 100 + 100 + 1, k = 3, d' = 212, 2 layers, batch 64"),
    Case("retrieval", {
        "task": {"name": "icqa", "k": 9, "n_q": 16, "n_a": 16},
        "model": {"name": "transformer", "layers": 4, "heads": 8, "width": 128},
        "train": {"optimizer": "adamw", "lr": 0.001, "batch_size": 128},
    }, "seed 002 §7.1 GPT-style shapes: width 128, 8 heads, MLP, 4 layers, sequences of 29 tokens "
       "(N = 4, D = 3 gives 28), batch 128; token inputs stand in for the vector task"),
]

# The same two cases with their batches from stream version 2 (``train.stream: 2``: made on the device by a
# counter-based generator): their data share and rate against the default cases' in the same run.
CASES += [Case(f"{c.name}-stream2", {**c.raw, "train": {**c.raw["train"], "stream": 2}},
               f"{c.note}; batches from stream 2 (made on the device)", group="stream2")
          for c in CASES if c.name in ("icqa-quick", "retrieval")]

FAMILIES = "families"  # the --case that selects every family case
FAMILY_MODELS: dict[str, dict[str, Any]] = {
    "transformer": {"layers": 1, "heads": 4, "positional": "learned"},
    "lstm": {"layers": 1},
    "dss": {"layers": 2},
    "mamba": {"layers": 2},
    "linear_transformer": {"layers": 2, "heads": 4},
    "retnet": {"layers": 2, "heads": 4},
}

CASES += [
    Case(f"{family}-n{n}-w{width}", {
        "task": {"name": "index_lookup", "N": n, "eval_size": 64},
        "model": {"name": family, "width": width, **shape},
        "train": {"optimizer": "adamw", "lr": 0.001, "batch_size": 64},
    }, f"seed 003 index lookup (§6, App. H.1), N = {n}: {family}, width {width}, {shape['layers']} layer(s), "
       "batch 64", group=FAMILIES)
    for family, shape in FAMILY_MODELS.items() for n in (100, 400) for width in (64, 256)
]


def case_names() -> list[str]:
    return [c.name for c in CASES] + [FAMILIES]


def chosen_cases(names: list[str] | None) -> list[Case]:
    """The cases ``--case`` names, in the order named (``families``: every family case, in their order; a case
    named twice is measured once), or the default ones. The order is the order of measurement, which decides
    what a bench stopped at its time limit has measured (``gpu_check.sh`` names first what no GPU measured yet)."""
    if not names:
        return [c for c in CASES if c.group == "default"]
    chosen: dict[str, Case] = {}
    for name in names:
        for case in CASES:
            if name in (case.name, case.group):
                chosen.setdefault(case.name, case)
    return list(chosen.values())


class TorchLSTM(torch.nn.Module):
    """The LSTM case's plain loop: ``nn.Embedding``, ``torch.nn.LSTM``, ``nn.LayerNorm`` and ``nn.Linear`` on the last
    position, for one
    run (what seed 003 App. H used: "PyTorch's standard or in-built implementation")."""

    def __init__(self, vocab: int, width: int, layers: int, classes: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.lstm = torch.nn.LSTM(width, width, num_layers=layers, batch_first=True)
        self.ln_final = torch.nn.LayerNorm(width)
        self.unembed = torch.nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [1, B, classes] from tokens [1, B, n] (the engine's run axis, one run)."""
        return self.unembed(self.ln_final(self.lstm(self.embed(tokens[0]))[0][:, -1]))[None]
