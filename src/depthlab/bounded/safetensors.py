"""safetensors files read header first: the header is bounded, parsed and checked before any tensor data is read.

The format (https://github.com/huggingface/safetensors): 8 bytes little-endian N, N bytes of JSON (each tensor's
``dtype``, ``shape`` and ``data_offsets`` into the data; ``__metadata__``, text to text), then the data. The
checks are the format's own (a known dtype, offsets that tile the data with no gap or overlap, each tensor's
bytes equal to its shape times its dtype's size, a file exactly as long as the header says), made before the
data is read, so a file of any size is judged by its first N + 8 bytes; then the caller's ``check`` sees the
header (the names, dtypes and shapes a run expects, its owner) before the data is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from depthlab.bounded.files import BoundError, open_regular, read_exactly, size_text
from depthlab.bounded.text import parse_json

MAX_HEADER_BYTES = 16 << 20
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header describes it."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked header: every tensor's entry, the metadata, and the sizes of the header and the data."""

    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    header_bytes: int
    data_bytes: int


def _counts(values: object) -> bool:
    """A JSON list of non-negative integers."""
    return isinstance(values, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in values)


def _entry(name: str, raw: object) -> TensorEntry:
    if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(f"tensor {name!r}: entry needs exactly dtype, shape and data_offsets")
    dtype, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"tensor {name!r}: unknown dtype {str(dtype)[:20]!r}")
    if not _counts(shape) or not _counts(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise ValueError(f"tensor {name!r}: shape and data_offsets must be non-negative integers")
    if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise ValueError(f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape} of {dtype}")
    return TensorEntry(dtype, tuple(shape), offsets[0], offsets[1])


def parse_header(raw: bytes, what: str) -> SafetensorsHeader:
    """The header's JSON checked as the format requires (ValueError saying what is wrong)."""
    header = parse_json(raw, what)
    if not isinstance(header, dict):
        raise ValueError("header is not a mapping")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ must map text to text")
    tensors = {name: _entry(name, entry) for name, entry in header.items()}
    end = 0
    for name, entry in sorted(tensors.items(), key=lambda item: (item[1].start, item[1].end)):
        if entry.start != end:
            raise ValueError(f"tensor {name!r}: data_offsets leave a gap or overlap at byte {end}")
        end = entry.end
    return SafetensorsHeader(tensors, metadata, len(raw), end)


def read_safetensors(path: str | Path, what: str,
                     check: Callable[[SafetensorsHeader], None] | None = None) -> tuple[SafetensorsHeader, bytes]:
    """The checked header and the whole file's bytes (for ``safetensors.torch.load``) of the regular file ``path``.

    ``check(header)`` runs after the header is read and before the data is: it raises to refuse the file. Any
    problem of the file itself is a :class:`BoundError` naming ``what``."""
    name = Path(path).name
    with open_regular(path, what) as (fd, size):
        if size < 8:
            raise BoundError(what, f"{name} has {size} bytes, too short for a safetensors header")
        prefix = read_exactly(fd, 8, path, what)
        n = int.from_bytes(prefix, "little")
        if n > MAX_HEADER_BYTES:
            raise BoundError(what, f"{name} declares a header of {n:,} bytes, more than the "
                                   f"{size_text(MAX_HEADER_BYTES)} allowed")
        if 8 + n > size:
            raise BoundError(what, f"{name} is truncated (header of {n:,} bytes, file of {size:,})")
        raw = read_exactly(fd, n, path, what)
        try:
            header = parse_header(raw, what)
        except BoundError as e:
            raise BoundError(what, f"{name} header is {e.detail}") from None
        except ValueError as e:
            raise BoundError(what, f"{name} header: {e}") from None
        if size != 8 + n + header.data_bytes:
            raise BoundError(what, f"{name} is truncated or padded ({size:,} bytes, its header says "
                                   f"{8 + n + header.data_bytes:,})")
        if check is not None:
            check(header)
        data = read_exactly(fd, header.data_bytes, path, what)
    if len(data) != header.data_bytes:
        raise BoundError(what, f"{name} was cut while being read")
    return header, prefix + raw + data
