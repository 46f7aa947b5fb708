"""What ``run_with_cache`` returns: hook name -> activation, with TransformerLens' ``ActivationCache`` helpers.

Indexing as TransformerLens indexes (``transformer_lens.utils.get_act_name``): ``cache["pattern", 1]`` is
``blocks.1.attn.hook_pattern``, ``cache["pattern", -1]`` the last layer's, ``cache["q", 0, "attn"]``,
``cache["resid_post", 0]``, ``cache["embed"]`` (``hook_embed``), ``cache["k6"]``; a name that is not in the cache
raises KeyError naming the closest names that are.

The helpers are TransformerLens' (same arguments, labels and shapes), computed from the cached activations and
the model's weights:

- :meth:`ActivationCache.accumulated_resid`: the residual stream before each layer, then after the last
  (``0_pre``, ``1_pre``, …, ``final_post``): [components, batch, pos, d_model];
- :meth:`ActivationCache.decompose_resid`: what each part wrote into it (``embed``, ``pos_embed``, ``0_attn_out``,
  ``0_mlp_out``, …), summing to the residual stream;
- :meth:`ActivationCache.stack_head_results`: each head's output ``z_h W_O,h`` (``L0H0``, …);
- :meth:`ActivationCache.logit_attrs`: a stack's components dotted with the unembedding columns of given labels;
- :meth:`ActivationCache.apply_ln_to_stack`: the final (or a block's) LayerNorm scale applied to a stack.

LayerNorm as TransformerLens treats it: a stack is centred and divided by the scale of the residual stream that
the norm reads (recomputed from the cached stream: depthlab's LayerNorm has no ``hook_scale``), and the norm's
gain and bias are not applied, which is exact for a model whose norms were folded into the next weights. depthlab
keeps them unfolded (``ln_final.w``, ``ln_final.b``), so its attributions are what TransformerLens gives on the
exported model loaded without ``fold_ln``. Seed 001's attention-only model has no norm and no bias: there the
attributions of :meth:`decompose_resid` add up to the logits exactly.

The helpers read a one-run model's cache (``Store.load_model``, :class:`~depthlab.models.SingleRunModel`):
activations ``[batch, pos, …]``, weights without the run axis.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import torch

Key = str | tuple[str, int] | tuple[str, int, str]
PosSlice = int | tuple[int, ...] | slice | list[int] | torch.Tensor | None

LAYER_TYPES = {"a": "attn", "m": "mlp", "b": "", "block": "", "blocks": "", "attention": "attn"}
NAME_ALIASES = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
                "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post", "scores": "attn_scores"}
ATTN_NAMES = ("k", "v", "q", "z", "rot_k", "rot_q", "result", "pattern", "attn_scores")
MLP_NAMES = ("pre", "post", "mid", "pre_linear")


def act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """The hook name a TransformerLens shorthand stands for (``transformer_lens.utils.get_act_name``'s rules):
    ``("k", 6, "a")`` -> ``blocks.6.attn.hook_k``, ``"pre5"`` -> ``blocks.5.mlp.hook_pre``, ``"embed"`` ->
    ``hook_embed``; a full name is returned as it is."""
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    match = re.match(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if match is not None:
        name, digits, layer_type = match.groups()
        layer = int(digits)
    name = NAME_ALIASES.get(name, name)
    if name in ATTN_NAMES:
        layer_type = "attn"
    elif name in MLP_NAMES:
        layer_type = "mlp"
    elif layer_type in LAYER_TYPES:
        layer_type = LAYER_TYPES[layer_type]
    full = (f"blocks.{layer}." if layer is not None else "") + (f"{layer_type}." if layer_type else "") + f"hook_{name}"
    return f"ln_final.{full}" if name in ("scale", "normalized") and layer is None else full


def pos_sliced(x: torch.Tensor, pos_slice: PosSlice, dim: int = -2) -> torch.Tensor:
    """TransformerLens' ``Slice`` on axis ``dim``: None keeps it, an int picks one position (the axis goes), a
    tuple is ``slice(*t)``, a list or tensor picks those positions."""
    if pos_slice is None:
        return x
    index: Any = slice(*pos_slice) if isinstance(pos_slice, tuple) else pos_slice
    return x[(slice(None),) * (dim % x.dim()) + (index,)]


class ActivationCache(dict):
    """Hook name -> activation (a dict, in the order the forward pass computed them), with TransformerLens'
    indexing and helpers (see the module's docstring). ``model`` is the model that filled it."""

    def __init__(self, *args: Any, model: Any = None) -> None:
        super().__init__(*args)
        self.model = model

    def __repr__(self) -> str:
        """A summary: how many activations, of which model, and each name with its shape (never the values, which
        ``print(cache)`` would otherwise write out in full)."""
        model = getattr(getattr(self.model, "cfg", None), "model_name", None)
        lines = [f"{name} {list(value.shape)}" if isinstance(value, torch.Tensor) else f"{name} {type(value).__name__}"
                 for name, value in self.items()]
        head = f"ActivationCache of {len(self)} activation{'s' if len(self) != 1 else ''}"
        head += f" ({model})" if model else ""
        return head + "".join(f"\n  {line}" for line in lines)

    __str__ = __repr__

    # ------------------------------------------------------------------------------------------- names
    @property
    def n_layers(self) -> int:
        if self.model is not None:
            return int(self.model.cfg.n_layers)
        layers = [int(m.group(1)) for name in self if (m := re.match(r"blocks\.(\d+)\.", name))]
        return max(layers, default=-1) + 1

    def __getitem__(self, key: Key) -> torch.Tensor:
        if isinstance(key, str) and dict.__contains__(self, key):
            return super().__getitem__(key)
        if isinstance(key, tuple):
            name, layer, *layer_type = key
            if layer is not None and layer < 0:  # as TransformerLens: -1 is the last layer
                layer += self.n_layers
            full = act_name(name, layer, *layer_type)
            if full not in self and layer is not None and not layer_type:
                # families whose mixer is not called ``attn`` (``blocks.0.ret.hook_q``): the one name that fits
                found = [k for k in self if k.startswith(f"blocks.{layer}.") and k.endswith(f".hook_{name}")]
                full = found[0] if len(found) == 1 else full
        else:
            full = act_name(key)
        if full in self:
            return super().__getitem__(full)
        close = difflib.get_close_matches(full, list(self), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        shown = "" if full == key else f" ({full})"
        raise KeyError(f"{key!r}{shown} is not in the cache{hint} (list(cache) lists its {len(self)} names)")

    def to(self, device: str | torch.device) -> ActivationCache:
        """Every activation moved to ``device`` (in place, as TransformerLens); returns the cache."""
        for name, value in list(self.items()):
            self[name] = value.to(device)
        return self

    # ------------------------------------------------------------------------------------------- helpers
    def _one_run_model(self, what: str) -> Any:
        if self.model is None or getattr(self.model, "n_runs", None) is not None:
            raise ValueError(f"{what}: needs the cache of a one-run model (Store.load_model or SingleRunModel), "
                             "whose weights have no run axis")
        return self.model

    def _last(self, layer: int | None) -> int:
        return self.n_layers if layer is None or layer == -1 else layer

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: PosSlice = None, mlp_input: bool = False, return_labels: bool = False
                          ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream before each layer up to ``layer`` (None or -1: all, then the final one):
        [components, …, d_model], labels ``0_pre``, ``0_mid`` (``incl_mid``), …, ``final_post``. ``apply_ln`` at
        the final layer normalises each component with its own statistics (the logit lens)."""
        n, layer = self.n_layers, self._last(layer)
        parts, labels = [], []
        for i in range(layer + 1):
            if i == n:
                parts.append(self["resid_post", n - 1])
                labels.append("final_post")
                continue
            parts.append(self["resid_pre", i])
            labels.append(f"{i}_pre")
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                parts.append(self["resid_mid", i])
                labels.append(f"{i}_mid")
        stack = torch.stack([pos_sliced(p, pos_slice) for p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input, pos_slice, recompute_ln=layer == n)
        return (stack, labels) if return_labels else stack

    def _mixer_out(self, layer: int) -> tuple[str, str]:
        """The name of what layer ``layer``'s attention (or recurrent mixer) writes, and its label."""
        name = f"blocks.{layer}.hook_attn_out"
        if name in self:
            return name, f"{layer}_attn_out"
        found = [k for k in self if re.fullmatch(rf"blocks\.{layer}\.hook_\w+_out", k) and not k.endswith("mlp_out")]
        if len(found) != 1:
            raise KeyError(f"blocks.{layer}: no output of its own in the cache (hook_attn_out or hook_*_out): "
                           "decompose_resid needs a model whose blocks add to a residual stream (not the LSTM)")
        return found[0], f"{layer}_{found[0].rsplit('hook_', 1)[1]}"

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: PosSlice = None, incl_embeds: bool = True,
                        return_labels: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """What each part wrote into the residual stream before ``layer`` (None or -1: before the unembedding):
        ``embed``, ``pos_embed`` (with ``incl_embeds``), then per layer ``{l}_attn_out`` and ``{l}_mlp_out``
        (``mode``: all, attn or mlp); ``mlp_input`` adds the layer's own attention output. They sum to the stream."""
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"decompose_resid: mode must be all, attn or mlp (got {mode!r})")
        layer = self._last(layer)
        with_mlp = mode != "attn" and self.model is not None and self.model.cfg.d_mlp is not None
        names: list[tuple[str, str]] = []
        if incl_embeds:
            names += [(name, name.removeprefix("hook_")) for name in ("hook_embed", "hook_pos_embed") if name in self]
        for i in range(layer):
            if mode != "mlp":
                names.append(self._mixer_out(i))
            if with_mlp:
                names.append((f"blocks.{i}.hook_mlp_out", f"{i}_mlp_out"))
        if mlp_input and mode != "mlp":
            names.append(self._mixer_out(layer))
        stack = torch.stack([pos_sliced(self[name], pos_slice) for name, _ in names])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input, pos_slice)
        return (stack, [label for _, label in names]) if return_labels else stack

    def stack_head_results(self, layer: int = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice: PosSlice = None, apply_ln: bool = False
                           ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """Each head's output ``z_h W_O,h`` in the layers before ``layer`` (-1 or None: all): [heads, …, d_model],
        labels ``L{l}H{h}``; ``incl_remainder`` adds the rest of the stream (``remainder``). Seed 001's
        attention-only model: ``W_O`` = I/m, so a head's result is its ``z`` over the layer's m heads."""
        model = self._one_run_model("stack_head_results")
        layer = self._last(layer)
        parts, labels = [], []
        for i in range(layer):
            z = self["z", i]  # [batch, pos, head, d_head]
            w_o = model.blocks[i].attn.W_O  # [head, d_head, d_model]
            result = torch.einsum("...hd,hdm->...hm", z, w_o.to(z.dtype))
            parts.append(pos_sliced(result, pos_slice, dim=-3))
            labels += [f"L{i}H{h}" for h in range(w_o.shape[0])]
        if parts:
            stack = torch.cat(parts, dim=-2).movedim(-2, 0)
        else:
            like = pos_sliced(self["hook_embed"], pos_slice)
            stack = like.new_zeros(0, *like.shape)
        if incl_remainder:
            stream = pos_sliced(self["resid_post", layer - 1] if layer else self["resid_pre", 0], pos_slice)
            stack = torch.cat([stack, (stream - stack.sum(0))[None]])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def logit_attrs(self, residual_stack: torch.Tensor, tokens: Any, incorrect_tokens: Any = None,
                    pos_slice: PosSlice = None, batch_slice: PosSlice = None, has_batch_dim: bool = True
                    ) -> torch.Tensor:
        """Each component of ``residual_stack`` (after the final LayerNorm's scale) dotted with the unembedding
        column of ``tokens`` (labels: ids, a tensor of ids, or a label as the task writes it), minus that of
        ``incorrect_tokens`` when given: [components, …]. ``tokens`` of shape [batch] give one label per example."""
        model = self._one_run_model("logit_attrs")
        directions = model.tokens_to_residual_directions(tokens)
        if incorrect_tokens is not None:
            wrong = model.tokens_to_residual_directions(incorrect_tokens)
            if wrong.shape != directions.shape:
                raise ValueError(f"logit_attrs: tokens and incorrect_tokens differ in shape "
                                 f"({list(directions.shape[:-1])} and {list(wrong.shape[:-1])})")
            directions = directions - wrong
        scaled = self.apply_ln_to_stack(residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice,
                                        has_batch_dim=has_batch_dim)
        if (has_batch_dim and not isinstance(batch_slice, int) and scaled.dim() == 4 and directions.dim() == 2
                and directions.shape[0] == scaled.shape[1]):
            directions = directions.unsqueeze(-2)  # one label per example, the same at every position
        return (scaled * directions.to(scaled.dtype)).sum(-1)

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: PosSlice = None, batch_slice: PosSlice = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> torch.Tensor:
        """A stack of residual components as the input of layer ``layer``'s LayerNorm (``mlp_input``: the MLP's;
        None or -1: the final one) sees them: centred (LayerNorm) and divided by the scale of the whole stream
        there, so the parts still add up. ``recompute_ln`` at the final layer normalises each component by its own
        statistics with the norm's gain and bias (the logit lens). Unchanged for a model without norms."""
        model = self._one_run_model("apply_ln_to_stack")
        n, layer = self.n_layers, self._last(layer)
        if has_batch_dim and batch_slice is not None:
            residual_stack = pos_sliced(residual_stack, batch_slice, dim=1)
        norm, eps = model.cfg.normalization_type, model.cfg.eps
        if norm is None:
            return residual_stack
        if recompute_ln and layer == n:
            w, b = model.ln_final.w, getattr(model.ln_final, "b", None)
            if norm == "RMS":
                return residual_stack * torch.rsqrt(residual_stack.pow(2).mean(-1, keepdim=True) + eps) * w
            return torch.nn.functional.layer_norm(residual_stack, w.shape, w, b, eps)
        if norm == "LN":
            residual_stack = residual_stack - residual_stack.mean(-1, keepdim=True)
        stream = self["resid_post", n - 1] if layer == n else self["resid_mid" if mlp_input else "resid_pre", layer]
        if norm == "LN":
            stream = stream - stream.mean(-1, keepdim=True)
        scale = (stream.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        scale = pos_sliced(scale, pos_slice)
        if has_batch_dim and batch_slice is not None:
            scale = pos_sliced(scale, batch_slice, dim=0)
        return residual_stack / scale
