"""LSTM (seed 003 §6, Appendix H: "We use PyTorch's standard or in-built implementation for experiments with
LSTMs"), for a group of runs.

The recurrence is ``torch.nn.LSTM`` itself (``layers`` stacked LSTM layers of hidden size ``width``):

    i, f, g, o = σ(W_i x_t + U_i h_{t-1} + b_i), σ(…), tanh(…), σ(…);  c_t = f ⊙ c_{t-1} + i ⊙ g;  h_t = o ⊙ tanh(c_t)

between a token embedding (``embed.W_E``) and a linear read-out (``ln_final``, ``unembed.W_U``) of the top
layer's h_t. Its weights live here with a leading run axis (``lstm.weight_ih_l0`` [R, 4·width, width] …, torch's
names and layouts) and each run is one ``torch.func.functional_call`` of a parameterless template
``nn.LSTM``: ``vmap`` has no batching rule for ``aten::lstm``, and one fused LSTM call per run measured 4× faster
than the same recurrence written with a run axis in Python (R = 2, batch 64, length 100, width 128, one thread:
120 ms against 500 ms per forward and backward). Initialisation is torch's: every weight and bias uniform in
±1/√width. State size: h and c of every layer, 2·layers·width.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch.func import functional_call

from .base import TaskShapes, register
from .recurrent import RecurrentSpec, SequenceStack


@register
class LSTMSpec(RecurrentSpec):
    """Parameters of the LSTM classifier."""

    name: Literal["lstm"] = "lstm"
    layers: int = Field(1, ge=1, le=8, description="stacked LSTM layers (the paper: at most 3)")
    width: int = Field(64, ge=1, description="hidden size (and embedding size)")

    family: ClassVar[type]

    @property
    def state_size(self) -> int:
        return 2 * self.layers * self.width


class LSTM(SequenceStack):
    """R runs of an embedding, ``torch.nn.LSTM`` and a linear read-out."""

    residual_blocks = False

    def __init__(self, spec: LSTMSpec, shapes: TaskShapes, n_runs: int, generators: list[torch.Generator]) -> None:
        template = torch.nn.LSTM(spec.width, spec.width, num_layers=spec.layers, batch_first=True)
        self._names = [name for name, _ in template.named_parameters()]
        self._shapes = {name: list(p.shape) for name, p in template.named_parameters()}
        super().__init__(spec, shapes, n_runs, generators)
        self._template = [template]  # in a list: not a submodule, so its own parameters are never trained

    def _init_mixer(self, layer: int) -> None:
        bound = 1.0 / math.sqrt(self.spec.width)
        for name in self._names:
            if name.endswith(f"_l{layer}"):
                self.add(f"lstm.{name}", self.uniform(self._shapes[name], -bound, bound))

    def body(self, x: torch.Tensor) -> torch.Tensor:
        lstm = self._template[0]
        outs = []
        for r in range(x.shape[0]):
            weights = {name: self.param(f"lstm.{name}")[r] for name in self._names}
            outs.append(functional_call(lstm, weights, (x[r],))[0])
        return torch.stack(outs)


LSTMSpec.family = LSTM
