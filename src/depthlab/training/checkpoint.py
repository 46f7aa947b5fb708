"""Checkpoints: weights and optimizer state as safetensors, plus a JSON sidecar (step, data-stream RNG state).

The safetensors file is the checkpoint: its metadata holds the step, the whole sidecar (as JSON) and a
SHA-256 of every tensor's bytes, so one atomic write (temporary file, fsync, rename) commits everything at
once. The sidecar ``checkpoint.json`` is written after it, also atomically, as a copy people and tools can
read without a safetensors parser. A crash between the two renames leaves new weights beside the previous
sidecar; loading trusts the weights file, so the pair can never mix two steps.

Loading checks the file before anything uses it: a truncated, corrupted or tampered file (bad header, data
that does not match its SHA-256, steps that disagree) raises :class:`CheckpointError`, a ``UserError`` whose
one-line message names the folder and what to do, and nothing is modified. SIGINT (Ctrl-C) that arrives
while a checkpoint is being written is held until the write has finished, so a checkpoint is either
complete or (if the process is killed outright) not there at all. Nothing is ever loaded with pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from ..errors import UserError
from ..store import atomic_write_bytes, atomic_write_json, to_json

WEIGHTS = "checkpoint.safetensors"
SIDECAR = "checkpoint.json"
FORMAT = 2  # 1: step in both files, sidecar authoritative; 2: everything embedded in the weights file
_META_KEY = "depthlab"
_DIGEST_KEY = "sha256"
_STALE = (f".{WEIGHTS}.*.tmp", f".{SIDECAR}.*.tmp")  # temporary files a killed writer may leave behind


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, and what `timeout`, schedulers and Ray send


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: corrupted, truncated, or not matching the config."""


def _fix_hint(folder: Path) -> str:
    return f"nothing was changed; restore the file, or delete {folder} to start the run again from step 0"


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs and deliver them afterwards (main thread only).

    What the interrupted code was writing is finished first; a held signal then goes to whatever handler was
    installed before (Python's default for SIGINT raises ``KeyboardInterrupt``; SIGTERM's ends the process).
    """
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if main else {}
    if not previous or None in previous.values():  # not the main thread, or a handler Python did not install
        yield
        return
    held: list[int] = []
    for sig in previous:
        signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)


def save_checkpoint(folder: Path, tensors: dict[str, torch.Tensor], step: int, extra: dict[str, Any]) -> None:
    """Write ``tensors`` and ``{"step": step, **extra}`` (JSON-able) as the checkpoint in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "step": int(step), **extra}
    digest = tensor_digest(tensors)
    data = save(tensors, metadata={"step": str(int(step)), _DIGEST_KEY: digest, _META_KEY: to_json(meta)})
    with deferred_interrupt():
        for pattern in _STALE:  # one writer per run folder: leftovers of a killed writer are safe to drop
            for stale in folder.glob(pattern):
                with contextlib.suppress(OSError):
                    stale.unlink()
        atomic_write_bytes(folder / WEIGHTS, data)  # the commit point
        atomic_write_json(folder / SIDECAR, {**meta, _DIGEST_KEY: digest, "weights": WEIGHTS})


def _parse(folder: Path, data: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if len(data) < 8:
        raise ValueError(f"{WEIGHTS} has {len(data)} bytes, too short for a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError(f"{WEIGHTS} is truncated (header of {size} bytes, file of {len(data)})")
    header = json.loads(data[8 : 8 + size])
    if not isinstance(header, dict):
        raise ValueError(f"{WEIGHTS} header is not a mapping")
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if len(data) != 8 + size + end:
        raise ValueError(f"{WEIGHTS} is truncated or padded ({len(data)} bytes, expected {8 + size + end})")
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{WEIGHTS} metadata is not a mapping")
    return load(data), metadata


def load_checkpoint(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """The checkpoint in ``folder`` (tensors, sidecar dict with ``step``), None if there is none.

    Raises CheckpointError, without touching any file, when the checkpoint is unusable.
    """
    weights, sidecar = folder / WEIGHTS, folder / SIDECAR
    if not weights.exists():
        if sidecar.exists():
            raise CheckpointError(f"checkpoint in {folder}: {SIDECAR} without {WEIGHTS}; {_fix_hint(folder)}")
        return None
    try:
        tensors, metadata = _parse(folder, weights.read_bytes())
        if _META_KEY in metadata:  # format 2: the weights file carries everything
            meta = json.loads(metadata[_META_KEY])
        elif sidecar.exists():  # format 1: the sidecar holds the rest
            meta = json.loads(sidecar.read_text())
        else:
            raise ValueError(f"{WEIGHTS} without {SIDECAR}")
        if not isinstance(meta, dict) or str(meta.get("step")) != metadata.get("step"):
            raise ValueError("weights and sidecar disagree on the step")
        meta["step"] = int(meta["step"])
        if _DIGEST_KEY in metadata and tensor_digest(tensors) != metadata[_DIGEST_KEY]:
            raise ValueError("tensor data does not match its SHA-256 (the file is corrupted)")
    except Exception as e:  # whatever the bytes are, the answer is one clear error
        detail = " ".join(str(e).split()) or type(e).__name__
        raise CheckpointError(
            f"checkpoint in {folder} is corrupted or truncated ({detail[:200]}); {_fix_hint(folder)}"
        ) from None
    return tensors, meta
