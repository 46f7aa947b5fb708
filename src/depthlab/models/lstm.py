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

Hook points: ``hook_embed``, and per layer ``blocks.{l}.hook_resid_pre`` (the layer's input), ``hook_state``
((h_t, c_t) after every position, [R, B, n, 2, width], read-only) and ``hook_resid_post`` (its output h_t; there is
no residual connection). With any of them attached the layers run one at a time (``hook_state`` then steps an
``nn.LSTMCell`` through the positions); without, all layers run in one fused call per run.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch.func import functional_call

from .base import register
from .components import Init
from .hooks import HookPoint
from .recurrent import RecurrentSpec, SequenceStack

GATES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")  # torch's parameter names, per layer


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


class LSTMLayer(torch.nn.Module):
    """The hook points of one LSTM layer (its weights are torch's, in ``lstm``)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_pre, self.hook_resid_post = HookPoint(), HookPoint()
        self.hook_state = HookPoint(read_only=True)
        self.points = [self.hook_resid_pre, self.hook_state, self.hook_resid_post]


class LSTM(SequenceStack):
    """R runs of an embedding, ``torch.nn.LSTM`` and a linear read-out."""

    def build_layers(self, init: Init) -> None:
        width, layers = self.spec.width, self.spec.layers
        bound = 1.0 / math.sqrt(width)
        self.lstm = torch.nn.Module()
        for layer in range(layers):
            for name in GATES:
                shape = [4 * width, width] if name.startswith("weight") else [4 * width]
                self.lstm.register_parameter(f"{name}_l{layer}", init.uniform(shape, -bound, bound))
        self.blocks = torch.nn.ModuleList(LSTMLayer() for _ in range(layers))
        # templates in a list: not submodules, so their own parameters are never trained
        self._templates = [torch.nn.LSTM(width, width, num_layers=layers, batch_first=True),
                           torch.nn.LSTM(width, width, batch_first=True), torch.nn.LSTMCell(width, width)]

    def weights(self, run: int, layer: int | None = None) -> dict[str, torch.Tensor]:
        """Run ``run``'s weights under the template's names: every layer's, or layer ``layer``'s as layer 0."""
        if layer is None:
            return {name: p[run] for name, p in self.lstm.named_parameters()}
        return {f"{name}_l0": getattr(self.lstm, f"{name}_l{layer}")[run] for name in GATES}

    def body(self, x: torch.Tensor) -> torch.Tensor:
        if not any(point.active for block in self.blocks for point in block.points):
            fused = self._templates[0]
            return torch.stack([functional_call(fused, self.weights(r), (x[r],))[0] for r in range(x.shape[0])])
        for layer, block in enumerate(self.blocks):
            x = block.hook_resid_pre(x)
            if block.hook_state.active:
                block.hook_state(self.layer_states(layer, x))
            one = self._templates[1]
            x = block.hook_resid_post(torch.stack([functional_call(one, self.weights(r, layer), (x[r],))[0]
                                                   for r in range(x.shape[0])]))
        return x

    def layer_states(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """(h_t, c_t) of layer ``layer`` after every position, stepping ``nn.LSTMCell``: [R, B, n, 2, width]."""
        cell = self._templates[2]
        runs = []
        for r in range(x.shape[0]):
            weights = {name.removesuffix("_l0"): w for name, w in self.weights(r, layer).items()}
            h = c = x.new_zeros(x.shape[1], self.spec.width)
            steps = []
            for t in range(x.shape[2]):
                h, c = functional_call(cell, weights, (x[r, :, t], (h, c)))
                steps.append(torch.stack([h, c], dim=1))
            runs.append(torch.stack(steps, dim=1))
        return torch.stack(runs)


LSTMSpec.family = LSTM
