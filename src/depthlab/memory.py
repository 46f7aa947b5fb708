"""How much memory depthlab may plan for, and the one check every size estimate goes through.

The budget is what the machine can give now: Linux's ``MemAvailable`` (within the cgroup's limit when the
process has one), or ``$DEPTHLAB_MEMORY`` when set (``16GiB``, ``512M``, ``1.5T``, a number of bytes, or
``off`` to skip the checks; ``depthlab --memory`` sets it). A size estimated above the budget is refused before
anything is allocated, with the estimate and the way to override in the message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ResourceError, UserError

ENV = "DEPTHLAB_MEMORY"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def parse_size(text: str) -> int | None:
    """``16GiB``, ``16G``, ``512M``, ``1.5T`` or a number of bytes, in bytes; ``off`` is None (no limit).

    ValueError saying what is allowed for anything else."""
    text = text.strip()
    if text.lower() in ("off", "none", "unlimited"):
        return None
    match = _SIZE.fullmatch(text)
    if not match or float(match[1]) * _UNITS[match[2].lower()] < 1:
        raise ValueError(f"must be a size such as 16GiB, 512M or 1.5T, or off (got {text!r})")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def format_bytes(n: float) -> str:
    """``n`` bytes for people: 59.6 GiB, 812.0 MiB, 4.0 KiB."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int | None:
    """Bytes this process can still get without swapping (MemAvailable, within a cgroup limit); None if unknown."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in _CGROUP_FILES:
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:  # v1 writes a huge number for no limit
            left = max(limit - usage, 0)
            available = left if available is None else min(available, left)
    return available


def memory_budget() -> tuple[int | None, str]:
    """(bytes depthlab may plan for, or None for no limit; where that number comes from, for messages)."""
    asked = os.environ.get(ENV)
    if asked:
        try:
            return parse_size(asked), f"allowed by ${ENV} (or --memory)"
        except ValueError as e:
            raise UserError(f"{ENV}: {e}") from None
    return available_memory(), "available on this machine"


def require_memory(need: int, what: str, fix: str, detail: str = "") -> None:
    """ResourceError when ``need`` bytes are more than the budget; nothing when the budget is unknown or off.

    ``what`` names the option or part and what needs the bytes (``-n: sampling 10 examples of icqa``),
    ``detail`` how they add up, ``fix`` how to ask for less (``lower -n``)."""
    budget, source = memory_budget()
    if budget is None or need <= budget:
        return
    override = format_bytes(need * 1.25).replace(" ", "")
    raise ResourceError(f"{what} needs about {format_bytes(need)}{f' ({detail})' if detail else ''}, more than "
                        f"the {format_bytes(budget)} {source}; {fix}, or set {ENV} to override (e.g. "
                        f"{ENV}={override}, or {ENV}=off; also `depthlab --memory SIZE`)")
