"""Checkpoints: weights and optimizer state as safetensors, plus a JSON sidecar (step, data-stream RNG state).

Both files are written atomically (temporary file, fsync, rename), weights first; the step is recorded in
both, and a checkpoint is used only when they agree, so a crash between the two writes can never pair
weights of one step with the sidecar of another. Nothing is ever loaded with pickle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from ..store import atomic_write_bytes, atomic_write_json

WEIGHTS = "checkpoint.safetensors"
SIDECAR = "checkpoint.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupted, truncated, or not matching the config."""


def save_checkpoint(folder: Path, tensors: dict[str, torch.Tensor], step: int, extra: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / WEIGHTS, save(tensors, metadata={"step": str(step)}))
    atomic_write_json(folder / SIDECAR, {"step": step, **extra})


def load_checkpoint(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """The checkpoint in ``folder``, or None if there is none; CheckpointError if it is unusable."""
    weights, sidecar = folder / WEIGHTS, folder / SIDECAR
    if not weights.exists() or not sidecar.exists():
        return None
    try:
        meta = json.loads(sidecar.read_text())
        tensors = load_file(weights)
        with open(weights, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
    except (json.JSONDecodeError, SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint in {folder} is corrupted or truncated: {e}") from None
    if str(meta.get("step")) != header.get("__metadata__", {}).get("step"):
        raise CheckpointError(f"checkpoint in {folder}: weights and sidecar disagree on the step")
    return tensors, meta
