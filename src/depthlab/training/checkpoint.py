"""Checkpoints: weights and optimizer state as safetensors, plus a JSON sidecar (step, data-stream RNG state, and
whether the step was compiled: ``compiled``, true/false, null while ``train.compile: auto`` is still timing both;
a run resumed with ``auto`` continues in that mode, for the compiled step rounds differently from the eager one).

The safetensors file is the checkpoint: its metadata holds the step, the run it belongs to (its id and the
SHA-256 of its resolved config), the whole sidecar (as JSON) and a SHA-256 of every tensor's bytes, so one atomic
write (temporary file, fsync, rename) commits everything at once. The sidecar ``checkpoint.json`` is written
after it, also atomically, as a copy people and tools can read without a safetensors parser. A crash between the
two renames leaves new weights beside the previous sidecar; loading trusts the weights file, so the pair can
never mix two steps.

Loading reads the file as safetensors' maintainers would have an untrusted one read (``depthlab.bounded``): a
regular file, its header alone first (bounded, its offsets checked); then, before any tensor is read, the run it
belongs to (:class:`Owner`: a checkpoint of another run is refused, one line naming both) and every tensor's
name, dtype, shape and byte size against what the run's model and optimizer hold (:class:`Layout`); then the
data and its SHA-256. A file that fails is a :class:`CheckpointError`, a ``UserError`` whose one-line message
names the folder and what to do, and nothing is modified. Format 2 checkpoints (run id without the config hash)
load where their run id matches; format 1 (the sidecar holds the run id) too. SIGINT (Ctrl-C) that arrives while
a checkpoint is being written is held until the write has finished, so a checkpoint is either complete or (if
the process is killed outright) not there at all. Nothing is ever loaded with pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from ..bounded import (
    MAX_JSON_BYTES,
    BoundError,
    SafetensorsHeader,
    Unreadable,
    parse_json,
    read_file,
    read_safetensors,
)
from ..config import RunConfig
from ..errors import ResourceError, UserError
from ..memory import require_memory
from ..models import TaskShapes, build_model
from ..store import Store, atomic_write_bytes, atomic_write_json, to_json

WEIGHTS = "checkpoint.safetensors"
SIDECAR = "checkpoint.json"
FORMAT = 3  # 1: step in both files, sidecar authoritative; 2: everything embedded in the weights file; 3: + config hash
_META_KEY = "depthlab"
_DIGEST_KEY = "sha256"
_STALE = (f".{WEIGHTS}.*.tmp", f".{SIDECAR}.*.tmp")  # temporary files a killed writer may leave behind
OPTIMIZER_STATES = {"sgd": ("momentum_buffer",), "adamw": ("exp_avg", "exp_avg_sq")}  # what GroupOptimizer keeps
STEP_DTYPES = frozenset({"F64", "F32", "I64"})  # optimizer.steps, one number per run
SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                      torch.uint8: "U8", torch.bool: "BOOL"}


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, and what `timeout`, schedulers and Ray send


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: corrupted, truncated, another run's, or not matching the config."""


def _fix_hint(folder: Path) -> str:
    return f"nothing was changed; restore the file, or delete {folder} to start the run again from step 0"


@dataclass(frozen=True)
class Owner:
    """The run a checkpoint belongs to: its id and the SHA-256 of its resolved config (the id is its first 16 hex
    digits, so a format-2 checkpoint, which records the id only, is verified by the id)."""

    run_id: str
    config_sha256: str

    @classmethod
    def of(cls, config: RunConfig) -> Owner:
        resolved = config.to_dict()
        return cls(Store.run_id(resolved), Store.config_hash(resolved))

    def check(self, meta: dict[str, Any], folder: Path) -> None:
        """CheckpointError unless ``meta`` (a checkpoint's metadata) names this run."""
        run_id, digest = meta.get("run_id"), meta.get("config_sha256")
        if run_id == self.run_id and digest in (None, self.config_sha256):
            return
        if not isinstance(run_id, str):
            raise CheckpointError(f"checkpoint in {folder} records no run id, so it cannot be shown to belong to run "
                                  f"{self.run_id}; {_fix_hint(folder)}")
        theirs = f" (config sha256 {str(digest)[:16]}…)" if digest else ""
        raise CheckpointError(
            f"checkpoint in {folder} belongs to run {run_id[:40]}{theirs}, not to run {self.run_id} (config sha256 "
            f"{self.config_sha256[:16]}…): it does not fit this run; nothing was changed; move it back to its own "
            f"run's folder, or delete {folder} to start run {self.run_id} again from step 0")


@dataclass(frozen=True)
class Layout:
    """The tensors a run's checkpoint may hold: ``name -> (allowed safetensors dtypes, shape)``; every name of
    ``required`` (the weights) must be there, the optimizer's are optional (a run's history keeps weights only)."""

    tensors: dict[str, tuple[frozenset[str], tuple[int, ...]]]
    required: frozenset[str]

    def check(self, header: SafetensorsHeader, folder: Path, run_id: str) -> None:
        """CheckpointError naming the first tensor that is missing, unknown, or of another dtype or shape."""
        problems = [f"no tensor {name}" for name in sorted(self.required - set(header.tensors))]
        for name, entry in header.tensors.items():
            dtypes, shape = self.tensors.get(name, (frozenset(), None))
            if shape is None:
                problems.append(f"unknown tensor {name[:80]!r}")
            elif entry.dtype not in dtypes or entry.shape != shape:
                problems.append(f"{name} is {entry.dtype} {list(entry.shape)}, the run needs "
                                f"{'/'.join(sorted(dtypes))} {list(shape)}")
        if problems:
            raise CheckpointError(f"checkpoint in {folder} does not fit run {run_id}'s config ({problems[0]}); nothing "
                                  f"was changed; delete {folder} to start the run again from step 0")


_LAYOUTS: dict[tuple[str, ...], Layout] = {}


def layout_of(config: RunConfig) -> Layout:
    """What a checkpoint of ``config``'s run holds: its model's weights (read from the model built on PyTorch's
    meta device: shapes, no storage) and its optimizer's state for each of them, plus the step count."""
    train = config.train
    states = OPTIMIZER_STATES[train.optimizer] if train.optimizer == "adamw" or train.momentum else ()
    key = (config.task.name, config.task.model_dump_json(), config.model.model_dump_json(), *states)
    if key not in _LAYOUTS:
        with torch.device("meta"):
            model = build_model(config.model, TaskShapes.of(config.task), [0])
        weights = {name: (frozenset({SAFETENSORS_DTYPES.get(p.dtype, str(p.dtype))}), tuple(p.shape[1:]))
                   for name, p in model.named_parameters()}
        tensors = {**weights, "optimizer.steps": (STEP_DTYPES, (1,))}
        for name, (dtypes, shape) in weights.items():
            tensors.update({f"optimizer.{name}.{state}": (dtypes | {"F32"}, shape) for state in states})
        _LAYOUTS[key] = Layout(tensors, frozenset(weights))
    return _LAYOUTS[key]


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


def save_checkpoint(folder: Path, tensors: dict[str, torch.Tensor], step: int, extra: dict[str, Any],
                    owner: Owner | None = None) -> None:
    """Write ``tensors`` and ``{"step": step, **extra}`` (JSON-able) as the checkpoint in ``folder``, recording the
    run ``owner`` it belongs to (a checkpoint without one can be loaded only where no run is asked for)."""
    folder.mkdir(parents=True, exist_ok=True)
    mine = {"run_id": owner.run_id, "config_sha256": owner.config_sha256} if owner else {}
    meta = {"format": FORMAT, "step": int(step), **extra, **mine}
    digest = tensor_digest(tensors)
    data = save(tensors, metadata={"step": str(int(step)), _DIGEST_KEY: digest, _META_KEY: to_json(meta)})
    with deferred_interrupt():
        for pattern in _STALE:  # one writer per run folder: leftovers of a killed writer are safe to drop
            for stale in folder.glob(pattern):
                with contextlib.suppress(OSError):
                    stale.unlink()
        atomic_write_bytes(folder / WEIGHTS, data)  # the commit point
        atomic_write_json(folder / SIDECAR, {**meta, _DIGEST_KEY: digest, "weights": WEIGHTS})


def _metadata(header: SafetensorsHeader, sidecar: Path, what: str) -> dict[str, Any]:
    """The checkpoint's metadata (step, run, data stream): in the weights file (format 2, 3) or the sidecar (1)."""
    if _META_KEY in header.metadata:
        meta = parse_json(header.metadata[_META_KEY], what)
    elif sidecar.exists():
        meta = parse_json(read_file(sidecar, MAX_JSON_BYTES, what), what)
    else:
        raise ValueError(f"{WEIGHTS} without {SIDECAR}")
    if not isinstance(meta, dict) or str(meta.get("step")) != header.metadata.get("step"):
        raise ValueError("weights and sidecar disagree on the step")
    return meta


def load_checkpoint(folder: Path, owner: Owner | None = None,
                    layout: Layout | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """The checkpoint in ``folder`` (tensors, sidecar dict with ``step``), None if there is none.

    ``owner``: the run it must belong to; ``layout``: the tensors it may hold (:func:`layout_of`); both are
    checked on the header, before any tensor is read (without a layout the data is checked against the memory
    budget only). Raises CheckpointError, without touching any file, when the checkpoint is unusable.
    """
    weights, sidecar = folder / WEIGHTS, folder / SIDECAR
    if not weights.exists() and not weights.is_symlink():
        if sidecar.exists():
            raise CheckpointError(f"checkpoint in {folder}: {SIDECAR} without {WEIGHTS}; {_fix_hint(folder)}")
        return None
    meta: dict[str, Any] = {}

    def check(header: SafetensorsHeader) -> None:  # before the data is read
        meta.update(_metadata(header, sidecar, f"checkpoint in {folder}"))
        if owner is not None:
            owner.check(meta, folder)
        if layout is not None:
            layout.check(header, folder, owner.run_id if owner else folder.name)

    tensors = _read(weights, folder, check if owner or layout else _no_bigger_than_memory(check))
    try:
        meta["step"] = int(meta["step"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"checkpoint in {folder} is corrupted (its step is not a number); "
                              f"{_fix_hint(folder)}") from None
    return tensors, meta


def read_weights(path: Path, layout: Layout, run_id: str) -> dict[str, torch.Tensor]:
    """The weights of one of a run's kept checkpoints (``history/step-N.safetensors``: weights only, no owner
    recorded), checked against ``layout`` before they are read."""
    tensors = _read(path, path.parent, lambda header: layout.check(header, path, run_id))
    return {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}


def _no_bigger_than_memory(check: Callable[[SafetensorsHeader], None]) -> Callable[[SafetensorsHeader], None]:
    """``check``, then the data's size against the memory budget (what bounds a file read with no layout)."""

    def checked(header: SafetensorsHeader) -> None:
        check(header)
        require_memory(2 * header.data_bytes, f"checkpoint: {header.data_bytes:,} bytes of tensors", "check the file")

    return checked


def _read(path: Path, folder: Path, check: Callable[[SafetensorsHeader], None]) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path`` (its header passed to ``check`` first, then its SHA-256
    checked when it records one); every problem is a CheckpointError naming ``folder``."""
    what = f"checkpoint in {folder}"
    try:
        header, data = read_safetensors(path, what, check)
        tensors = load(data)
        if _DIGEST_KEY in header.metadata and tensor_digest(tensors) != header.metadata[_DIGEST_KEY]:
            raise ValueError("tensor data does not match its SHA-256 (the file is corrupted)")
    except (CheckpointError, ResourceError):
        raise
    except Unreadable as e:  # what the file is, not what it holds
        raise CheckpointError(f"{what}: {e.detail[:200]}; {_fix_hint(folder)}") from None
    except BoundError as e:
        raise CheckpointError(f"{what} is corrupted or truncated ({e.detail[:200]}); {_fix_hint(folder)}") from None
    except Exception as e:  # whatever the bytes are, the answer is one clear error
        detail = " ".join(str(e).split()) or type(e).__name__
        raise CheckpointError(f"{what} is corrupted or truncated ({detail[:200]}); {_fix_hint(folder)}") from None
    return tensors
