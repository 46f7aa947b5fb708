"""TransformerLens models for the induction measurements: the adapter, the offline loader, the ReLU hooks.

The only module of depthlab that imports TransformerLens, and only inside functions (``pip install
'depthlab[tl]'``). It serves both generations:
- 4.x ``TransformerBridge``: ``boot_native`` models, local folders of a TransformerLens-format state dict
  (``embed.W_E``, ``blocks.{l}.attn.W_Q`` [heads, d_model, d_head], …, as ``depthlab export`` writes and
  ``HookedTransformer.state_dict()`` saved) converted with ``convert_tl_checkpoint``, and named models from the
  local Hugging Face cache (NeelNanda/…, ArthurConmy/…, Baidicoot/… read like ``boot_tl_legacy`` but without its
  Hub call; ``boot_transformers`` otherwise);
- 3.x ``HookedTransformer``, where it is still installed: ``HookedTransformer(cfg)`` with the same state dict,
  ``HookedTransformer.from_pretrained(name)`` for names.
:class:`TLModel` is duck-typed: anything called as ``model(tokens) -> [batch, pos, d_vocab]`` with ``W_U`` and
``cfg.n_ctx`` works (a HookedTransformer, a TransformerBridge, or a look-alike).

Seed 001's ReLU attention (``σ(z) = max{0, z}``, no softmax) is not native to TransformerLens: an exported
attention-only run carries ``"depthlab": {"attention": "relu"}`` in its config and :func:`relu_attention_hooks`
replaces every ``hook_pattern`` by ReLU of the attention scores recomputed from ``hook_q`` and ``hook_k`` (in 4.x
``hook_attn_scores`` fires after ``hook_pattern``, so the scores are rebuilt, not read). :func:`load_folder`
attaches them to the model it loads as *permanent* hooks (:func:`attach_attention_hooks`), so the TransformerLens
model computes seed 001's attention in every call — ``model(tokens)``, ``run_with_cache``, ``run_with_hooks`` (the
user's hooks on ``hook_pattern`` then see the ReLU pattern) — until ``reset_hooks(including_permanent=True)``.
On every depthlab export the same hooks put depthlab's scores into ``hook_attn_scores`` (4.x hands that hook the
pattern), and the task's vocabulary becomes the model's tokenizer (:func:`task_tokenizer`).
"""

from __future__ import annotations

import contextlib
import math
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import torch

from depthlab.bounded import (
    MAX_JSON_BYTES,
    SafetensorsHeader,
    open_regular,
    parse_json,
    read_file,
    read_safetensors,
)
from depthlab.errors import UserError
from depthlab.memory import require_memory

INSTALL = "pip install 'depthlab[tl]'"
LEGACY_PREFIXES = ("NeelNanda/", "ArthurConmy/", "Baidicoot/")
UNKNOWN = "[UNK]"  # not in any task's vocabulary: a word outside it fails to encode


class TLModel:
    """A TransformerLens model (3.x HookedTransformer or 4.x TransformerBridge) as a ``LogitModel``."""

    def __init__(self, model: Any, name: str) -> None:
        self.model = model.eval() if hasattr(model, "eval") else model
        self.name = name
        self.d_vocab = int(model.W_U.shape[-1])
        self.n_ctx: int | None = getattr(model.cfg, "n_ctx", None)

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens.to(self.unembed().device))[:, -1].float().cpu()

    def unembed(self) -> torch.Tensor:
        return self.model.W_U.detach()


def attention_hooks(n_layers: int, relu: bool, causal: bool = False) -> list[tuple[str, Any]]:
    """Hooks that make an exported depthlab model's attention hooks hold what depthlab's hold.

    ``hook_q`` / ``hook_k`` ([batch, pos, head, d_head]) are recorded per layer; ``hook_attn_scores`` is replaced by
    the scores q·k / √d_head ([batch, head, query, key]; −∞ above the diagonal when ``causal``), depthlab's
    ``hook_attn_scores`` (TransformerLens 4.x fires that hook after ``hook_pattern`` and hands it the pattern);
    with ``relu``, ``hook_pattern`` is replaced by seed 001's ReLU attention max(0, scores) (the export scales
    W_Q by √d_head, so these are the unscaled x W_QK xᵀ of seed 001; no mask: its attention is bidirectional).
    """
    hooks: list[tuple[str, Any]] = []
    for layer in range(n_layers):
        seen: dict[str, torch.Tensor] = {}
        prefix = f"blocks.{layer}.attn"
        hooks += [(f"{prefix}.hook_q", partial(_keep, seen=seen, role="q")),
                  (f"{prefix}.hook_k", partial(_keep, seen=seen, role="k")),
                  (f"{prefix}.hook_attn_scores", partial(_scores, seen=seen, causal=causal))]
        if relu:
            hooks.append((f"{prefix}.hook_pattern", partial(_relu_pattern, seen=seen)))
    return hooks


def relu_attention_hooks(n_layers: int) -> list[tuple[str, Any]]:
    """:func:`attention_hooks` of a seed 001 ReLU run: softmax attention turned into pattern = max(0, q·k)."""
    return attention_hooks(n_layers, relu=True)


def attach_attention_hooks(model: Any, n_layers: int, relu: bool, causal: bool = False) -> Any:
    """:func:`attention_hooks` attached to a TransformerLens model as permanent hooks (they survive
    ``reset_hooks()``). Returns the model."""
    # 4.x warns at every call that a replaced hook_attn_scores no longer reaches the output: it never did, that
    # hook fires after the pattern; replacing it is how the scores get into the cache
    warnings.filterwarnings("ignore", message="A hook on attn.hook_attn_scores returned a modified tensor")
    for name, fn in attention_hooks(n_layers, relu, causal):
        model.add_hook(name, fn, is_permanent=True)
    return model


def attach_relu_attention(model: Any, n_layers: int) -> Any:
    """Make a TransformerLens model (a softmax attention-only model exported from a seed 001 ReLU run) compute
    ReLU attention (:func:`attach_attention_hooks` with ``relu``). Returns the model."""
    return attach_attention_hooks(model, n_layers, relu=True)


def _keep(t: torch.Tensor, hook: Any, seen: dict[str, torch.Tensor], role: str) -> torch.Tensor:
    seen[role] = t
    return t


def _raw_scores(seen: dict[str, torch.Tensor]) -> torch.Tensor:
    q, k = seen["q"], seen["k"]
    return torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])


def _relu_pattern(pattern: torch.Tensor, hook: Any, seen: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.relu(_raw_scores(seen)).to(pattern.dtype)


def _scores(given: torch.Tensor, hook: Any, seen: dict[str, torch.Tensor], causal: bool) -> torch.Tensor:
    scores = _raw_scores(seen)
    if causal:
        n = scores.shape[-1]
        above = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    return scores.to(given.dtype)


def _tl() -> Any:
    try:
        import transformer_lens
    except ImportError:
        raise UserError(f"--model: TransformerLens is not installed; {INSTALL}") from None
    return transformer_lens


def _hooked_transformer() -> Any | None:
    """3.x ``HookedTransformer`` where installed; None under 4.x (where importing it raises)."""
    try:
        from transformer_lens import HookedTransformer
    except ImportError:
        return None
    return HookedTransformer


def build_from_config(config: dict[str, Any], state: dict[str, torch.Tensor] | None = None) -> Any:
    """A TransformerLens model from a config dict (TransformerBridgeConfig fields), with a property-format
    state dict loaded when given: 4.x through ``boot_native`` and ``convert_tl_checkpoint``, 3.x directly."""
    _tl()
    hooked = _hooked_transformer()
    if hooked is not None:
        from transformer_lens import HookedTransformerConfig

        model = hooked(HookedTransformerConfig(**config))
        if state is not None:
            model.load_state_dict(state, strict=False)
        return model
    from transformer_lens.config import TransformerBridgeConfig

    return _boot_native(TransformerBridgeConfig.from_dict(config), state)


def _boot_native(cfg: Any, state: dict[str, torch.Tensor] | None) -> Any:
    """``TransformerBridge.boot_native(cfg)`` with a property-format state dict converted and loaded (strict)."""
    import transformer_lens.model_bridge.sources.native  # noqa: F401  (attaches boot_native)
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    bridge = TransformerBridge.boot_native(cfg)
    if state is not None:
        bridge.load_state_dict(convert_tl_checkpoint(state, cfg), strict=True)
    return bridge


def _legacy_from_cache(name: str) -> Any:
    """A NeelNanda/… (ArthurConmy/…, Baidicoot/…) model from the local Hugging Face cache.

    ``boot_tl_legacy`` lists the repository's files on the Hub first, which offline mode refuses; this reads
    the cached snapshot instead: TransformerLens' own config derivation, the ``*final.pth`` state dict
    (weights_only=True), a zero unembedding bias where the repository has none (as the legacy loader did).
    """
    from huggingface_hub import snapshot_download
    from transformer_lens.model_bridge.sources.tl_legacy import derive_tl_legacy_config

    folder = Path(snapshot_download(name, local_files_only=True))
    cfg = derive_tl_legacy_config(name)
    if getattr(cfg, "original_architecture", "neel") != "neel":
        raise UserError(f"--model: {name} has an old weight layout; load it once online with "
                        f"TransformerBridge.boot_tl_legacy and save the bridge's state dict")
    saved = sorted(folder.glob("*final.pth")) or sorted(folder.glob("*.pth"))
    if not saved:
        raise UserError(f"--model: no .pth state dict in the cached snapshot {folder}")
    state = _torch_state(saved[0])
    state.setdefault("unembed.b_U", torch.zeros(cfg.d_vocab))
    return _boot_native(cfg, state)


def _read_state(folder: Path) -> dict[str, torch.Tensor]:
    """The folder's weights: ``model.safetensors`` (its header read first, its size against the memory budget),
    else one ``*.pth`` / ``*.pt`` read with weights_only=True."""
    from safetensors.torch import load

    if (folder / "model.safetensors").exists():
        def fits(header: SafetensorsHeader) -> None:
            require_memory(2 * header.data_bytes, f"--model: {folder / 'model.safetensors'}", "use a smaller model")

        return load(read_safetensors(folder / "model.safetensors", "--model", fits)[1])
    saved = sorted([*folder.glob("*.pth"), *folder.glob("*.pt")])
    if len(saved) != 1:
        raise UserError(f"--model: {folder} needs model.safetensors or exactly one .pth/.pt state dict "
                        f"(found {len(saved)})")
    return _torch_state(saved[0])


def _torch_state(path: Path) -> dict[str, torch.Tensor]:
    """A ``.pth`` state dict read with weights_only=True (a regular file; torch's warnings about the pickle's
    protocol kept off the terminal): a file that would run code is one line saying so; one whose size cannot fit
    in memory twice (the file and its tensors) is refused before torch reads it."""
    with open_regular(path, "--model") as (_, size), warnings.catch_warnings():
        require_memory(2 * size, f"--model: {path}", "use a smaller model")
        warnings.simplefilter("ignore")
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # UnpicklingError for a file that would run code; others for garbage
            text = str(e).partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
            found = " ".join((text or str(e)).split())[:160]
            raise UserError(f"--model: {path} is not a plain state dict; torch refused to load it with "
                            f"weights_only=True (depthlab never runs code from a file): {found}") from None


def load_folder(folder: str | Path) -> TLModel:
    """A folder (``str`` or ``Path``) holding ``config.json`` (TransformerLens config fields) and a property-format
    state dict; ``.model`` is the TransformerLens model. A depthlab export of a ReLU run gets its ReLU attention
    as permanent hooks (:func:`attach_relu_attention`): its logits are depthlab's in every call."""
    folder = Path(folder).expanduser()
    config = parse_json(read_file(folder / "config.json", MAX_JSON_BYTES, "--model"), f"--model {folder}/config.json")
    if not isinstance(config, dict):
        raise UserError(f"--model: {folder}/config.json must hold a mapping of TransformerLens config fields")
    extra = config.pop("depthlab", {})
    model = build_from_config(config, _read_state(folder))
    if extra:  # a depthlab export: its attention hooks hold depthlab's scores (and its ReLU pattern)
        attach_attention_hooks(model, config["n_layers"], extra.get("attention") == "relu",
                               config.get("attention_dir") == "causal")
    if extra.get("vocab"):
        model.tokenizer = task_tokenizer(extra["vocab"])
    return TLModel(model, str(folder))


def task_tokenizer(vocab: list[str]) -> Any:
    """A Hugging Face tokenizer of a task's vocabulary, built here (nothing downloaded): one token per word
    (words split at whitespace, as ``depthlab sample`` writes examples), token id = its place in ``vocab``; a
    word outside it is an error, not an unknown token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    word_level = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocab)}, unk_token=UNKNOWN))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token=vocab[0])  # equal lengths: never padded


def load_named(name: str) -> TLModel:
    """A named pretrained model from the local Hugging Face cache (HF_HUB_OFFLINE=1 makes sure nothing is
    downloaded): legacy TransformerLens repositories through :func:`_legacy_from_cache`, Hugging Face models
    through ``boot_transformers``; aliases such as ``attn-only-2l`` resolve as TransformerLens resolves them."""
    _tl()
    hooked = _hooked_transformer()
    if hooked is not None:
        return TLModel(hooked.from_pretrained(name), name)
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.tools.model_registry.registry_io import resolve_model_alias

    official = resolve_model_alias(name) or name  # attn-only-2l → NeelNanda/Attn_Only_2L512W_C4_Code
    if official.startswith(LEGACY_PREFIXES):
        return TLModel(_legacy_from_cache(official), name)
    return TLModel(TransformerBridge.boot_transformers(official), name)


def load(name_or_path: str, device: str = "cpu") -> TLModel:
    """``--model``: a local folder (see :func:`load_folder`) or a model name in the local cache."""
    path = Path(name_or_path).expanduser()
    looks_like_path = path.is_dir() or name_or_path.startswith(("/", ".", "~"))
    if looks_like_path and not (path / "config.json").exists():
        raise UserError(f"--model: {name_or_path} is not a folder with config.json and model.safetensors "
                        f"(or one .pth state dict); a name is looked up in the local Hugging Face cache")
    try:  # TransformerLens prints progress ("Moving model to device") to stdout; --json owns stdout
        with contextlib.redirect_stdout(sys.stderr):
            model = load_folder(path) if (path / "config.json").exists() else load_named(name_or_path)
            model.model.to(device)
    except UserError:
        raise
    except Exception as e:  # TransformerLens and the hub raise many types; the user needs one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"--model: cannot load {name_or_path!r}: {first}") from None
    return model
