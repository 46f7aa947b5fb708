"""The JSON summary of ``benchmarks/gpu_check.sh``: every step's wall time and exit code, and what it measured.

    python benchmarks/gpu_check_summary.py OUT MODE STARTED FINISHED

Reads ``OUT/steps.jsonl`` (one line per step, written by the script) and each step's output, and writes
``OUT/gpu_check.json`` (also printed): the machine (torch, CUDA, the GPU), the steps, the GPU tests' counts (from
pytest's JUnit XML), and the JSON the benchmark and reproduce commands printed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                            "cuda_available": torch.cuda.is_available(), "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                       "count": torch.cuda.device_count()}
    return info


def test_counts(path: Path) -> dict[str, int] | None:
    """Passed, failed, errors and skipped of a pytest JUnit XML file (None when it was not written)."""
    if not path.exists():
        return None
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    return {"passed": total - failed - errors - skipped, "failed": failed, "errors": errors, "skipped": skipped}


def printed_json(path: Path) -> Any:
    """The one JSON object a ``--json`` command printed; for a bench stopped before it printed one, the rows it
    streamed to stderr (one JSON line each) as ``{"stopped": true, "cases": [...]}``; else None."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    try:
        lines = path.with_suffix(".err").read_text().splitlines()
    except OSError:
        return None
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "name" in row:
            rows.append(row)
    return {"stopped": True, "cases": rows} if rows else None


def main(out: Path, mode: str, started: float, finished: float) -> dict[str, Any]:
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    results: dict[str, Any] = {}
    for step in steps:
        name = step["name"]
        step["output"] = str(out / f"{name}.out")
        results[name] = test_counts(out / "pytest-gpu.xml") if name == "pytest-gpu" else printed_json(
            out / f"{name}.out")
    summary = {"mode": mode, "machine": machine(), "wall_seconds": round(finished - started, 1),
               "steps": steps, "results": results}
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("mode", "machine", "wall_seconds", "steps")}, indent=1))
    return summary


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
