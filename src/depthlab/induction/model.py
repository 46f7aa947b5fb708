"""The one interface the induction measurements need, and its adapter for depthlab's own trained runs.

Seed 004 measures input-output behaviour only: "the logprobs at the last position", and the unembedding ("a
token near to B in the unembedding space"). So a model is anything that maps token ids to the logits at the last
position and exposes its unembedding matrix. TransformerLens models come in through ``depthlab.induction.tl``
(the only module that imports TransformerLens); depthlab's runs through :class:`RunModel`.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from .sequences import SEED
from .sequences import Protocol as SequenceProtocol


class LogitModel(Protocol):
    """A causal language model as seed 004 uses it.

    ``name``: what to call it in tables; ``d_vocab``: the number of output tokens; ``n_ctx``: the longest input
    it takes (None: no limit); ``logits(tokens [B, n]) -> [B, d_vocab]`` at the last position;
    ``unembed() -> [d_model, d_vocab]`` (TransformerLens' ``W_U``: one column per token).
    """

    name: str
    d_vocab: int
    n_ctx: int | None

    def logits(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def unembed(self) -> torch.Tensor: ...


class RunModel:
    """A trained depthlab run (``depthlab.analysis.runs.LoadedRun``) whose task predicts vocabulary tokens.

    Its model reads the last position and its output classes are the task's labels; the task must use the
    vocabulary as labels (as ``induction`` does) for logits to be next-token logits. Inputs must have the task's
    length (the attention-only model's positions are one-hot, one per position): ``protocol`` says where the
    tokens go.
    """

    def __init__(self, run: Any) -> None:
        task = run.task
        if list(task.labels) != list(task.vocab):
            raise ValueError(f"run {run.id}: task {task.name} predicts classes, not vocabulary tokens; "
                             f"induction measurements need a language-model task such as induction")
        self.model = run.model
        self.name = f"{run.id} ({run.config.model.name}, {run.config.model.layers} layers)"
        self.layers = int(run.config.model.layers)
        self.d_vocab = len(task.vocab)
        self.n_ctx: int | None = task.seq_len
        # measured on sequences of the task's length (the seed's 24 by default), the earlier A at index 10 if it fits
        self.protocol = SequenceProtocol(task.seq_len, min(SEED.first, task.seq_len - 4))

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens[None]).outputs[0]

    def unembed(self) -> torch.Tensor:
        return self.model.param("unembed.W_U")[0].detach()
