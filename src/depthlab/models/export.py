"""A trained model as a TransformerLens model: its state dict and config (``depthlab export RUN --to
transformerlens``).

Written without importing TransformerLens: ``model.safetensors`` holds the state dict in TransformerLens'
property format (``embed.W_E`` [d_vocab, d_model], ``pos_embed.W_pos`` [n_ctx, d_model],
``blocks.{l}.attn.W_Q`` [heads, d_model, d_head], ``blocks.{l}.attn.W_O`` [heads, d_head, d_model],
``blocks.{l}.ln1.w``, ``unembed.W_U`` [d_model, d_vocab], …), and ``config.json`` the fields of a
``TransformerBridgeConfig`` / ``HookedTransformerConfig``. Load it with TransformerLens 4.x:

    cfg = TransformerBridgeConfig.from_dict({k: v for k, v in config.items() if k != "depthlab"})
    model = TransformerBridge.boot_native(cfg)
    model.load_state_dict(convert_tl_checkpoint(load_file("model.safetensors"), cfg))

(3.x: ``HookedTransformer(HookedTransformerConfig(**config)).load_state_dict(state, strict=False)``), or with
``depthlab induction --model FOLDER`` / ``depthlab.induction.tl.load_folder``.

The GPT-style ``transformer`` (seed 002 §7.1) already names its weights this way: the export is its run's state
dict (learned positions; sinusoidal positions become a fixed ``W_pos``). Seed 001's ``attention_only`` model has
no TransformerLens counterpart — one-hot tokens with one-hot positions *concatenated*, W_QK as one matrix, heads
averaged, ReLU attention, no causal mask — and is written as an equivalent bidirectional attention-only model:

- ``W_E`` = [I_d | 0] (token t → coordinate t) and ``W_pos`` = position i → coordinate d + i: adding these is
  seed 001's concatenation (eq. 3), d_model = d' (the run's width);
- per head, ``W_Q`` = W_QK · √d_head and ``W_K`` = I (d_head = d'), so TransformerLens' scores q·k / √d_head are
  seed 001's x_q W_QK x_kᵀ; ``W_V`` = the head's W_V, ``W_O`` = I / m (eq. 2's average over the m heads; layers
  with fewer heads are padded with zero heads); biases zero, no LayerNorm, ``attention_dir: bidirectional``;
- ReLU attention: ``config["depthlab"]["attention"] == "relu"``, and the hooks of
  :func:`depthlab.induction.tl.relu_attention_hooks` replace each softmax pattern by max(0, score):
  :func:`depthlab.induction.tl.load_folder` attaches them to the model it loads as permanent hooks
  (:func:`depthlab.induction.tl.attach_relu_attention` on a model loaded by hand).

Either family: ``hook_attn_scores`` holds depthlab's scores (q·k / √d_head, −∞ where a causal mask hides a key)
on the model :func:`~depthlab.induction.tl.load_folder` loads (TransformerLens 4.x fires that hook after
``hook_pattern`` with the pattern in it; the loader's hooks put the scores back,
:func:`depthlab.induction.tl.attention_hooks`); ``hook_q`` of seed 001's model is √d' times depthlab's (above).
A token task's vocabulary goes into ``config["depthlab"]["vocab"]``, from which the loader builds the model's
tokenizer (:func:`depthlab.induction.tl.task_tokenizer`): ``to_str_tokens``, ``to_tokens`` and ``to_string``
work on the exported model as on depthlab's; ``default_prepend_bos`` is false (no task has a BOS token).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from .base import RunModule

NATIVE_POSITIONS = ("learned", "sinusoidal")


def _transformer(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    spec = model.spec
    if spec.positional not in NATIVE_POSITIONS:
        raise UserError(f"--to transformerlens: model.positional {spec.positional!r} has no TransformerLens "
                        f"counterpart; exportable: {', '.join(NATIVE_POSITIONS)}")
    state = model.run_state_dict(0)
    if spec.positional == "sinusoidal":
        state["pos_embed.W_pos"] = model.sinusoidal.clone()
    shapes = model.shapes
    config = {"n_layers": spec.layers, "d_model": spec.width, "n_heads": spec.heads, "d_head": spec.head_size,
              "d_mlp": (spec.d_mlp or 4 * spec.width) if spec.mlp else None, "attn_only": not spec.mlp,
              "act_fn": "gelu", "normalization_type": "LN", "eps": 1e-5, "n_ctx": shapes.seq_len,
              "d_vocab": shapes.vocab_size, "d_vocab_out": shapes.n_classes, "positional_embedding_type": "standard",
              "attention_dir": "causal" if spec.causal else "bidirectional"}
    return state, config


def _attention_only(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    spec = model.spec
    d, n, width = model.d, model.n, model.width
    heads = max(spec.heads_per_layer)
    state = {"embed.W_E": torch.eye(d, width), "pos_embed.W_pos": model.positions.clone()}
    for layer, m in enumerate(spec.heads_per_layer):
        p = f"blocks.{layer}.attn"
        w_qk, w_v = model.param(f"{p}.W_QK")[0].detach(), model.param(f"{p}.W_V")[0].detach()
        state[f"{p}.W_Q"] = torch.zeros(heads, width, width)
        state[f"{p}.W_Q"][:m] = w_qk * math.sqrt(width)
        state[f"{p}.W_K"] = torch.eye(width).expand(heads, width, width).clone()
        state[f"{p}.W_V"] = torch.zeros(heads, width, width)
        state[f"{p}.W_V"][:m] = w_v
        state[f"{p}.W_O"] = torch.zeros(heads, width, width)
        state[f"{p}.W_O"][:m] = torch.eye(width) / m
        for name in ("b_Q", "b_K", "b_V"):
            state[f"{p}.{name}"] = torch.zeros(heads, width)
        state[f"{p}.b_O"] = torch.zeros(width)
    state["unembed.W_U"] = model.param("unembed.W_U")[0].detach().clone()
    state["unembed.b_U"] = torch.zeros(model.n_classes)
    config = {"n_layers": spec.layers, "d_model": width, "n_heads": heads, "d_head": width, "d_mlp": None,
              "attn_only": True, "act_fn": "relu", "normalization_type": None, "n_ctx": n, "d_vocab": d,
              "d_vocab_out": model.n_classes, "positional_embedding_type": "standard",
              "attention_dir": "bidirectional", "depthlab": {"attention": spec.attention}}
    return state, config


EXPORTERS = {"transformer": _transformer, "attention_only": _attention_only}


def transformerlens_export(model: RunModule, about: dict[str, Any] | None = None, task: Any = None
                           ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A one-run model as a TransformerLens state dict and config; ``about`` (e.g. the run id and step) goes into
    the config's ``depthlab`` entry with the model spec, and a token ``task``'s vocabulary as ``vocab`` (the
    loader builds the tokenizer from it: ``to_str_tokens`` and ``to_tokens`` on the exported model)."""
    family = model.spec.name
    if family not in EXPORTERS:
        raise UserError(f"--to transformerlens: model {family!r} cannot be exported; "
                        f"exportable: {', '.join(EXPORTERS)}")
    state, config = EXPORTERS[family](model)
    config["default_prepend_bos"] = False  # a task's sequences have no beginning-of-sequence token
    vocab = {"vocab": list(task.vocab)} if task is not None and not getattr(task, "input_dim", None) else {}
    config["depthlab"] = {**(about or {}), "model": model.spec.model_dump(mode="json"), **vocab,
                          **config.get("depthlab", {})}
    return {k: v.contiguous() for k, v in state.items()}, config


def write_export(state: dict[str, torch.Tensor], config: dict[str, Any], folder: Path) -> list[Path]:
    """``model.safetensors`` and ``config.json`` in ``folder`` (created), both with the permissions the user's
    umask gives a new file (``save_file`` would write the weights 0600); never pickle."""
    from safetensors.torch import save

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(save(state))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return [folder / "model.safetensors", folder / "config.json"]
