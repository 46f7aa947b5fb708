"""Every preset's paper-scale plan in one process: what ``depthlab reproduce NAME --scale paper --plan --json``
prints, for each preset, without a process (and a CUDA context) per preset — 18 plans on a lent GPU in about a
minute instead of four.

    python benchmarks/plan_presets.py OUT [--device cuda] [--seconds 3] [--presets a,b]

Writes ``OUT/NAME.json`` (the plan) for each preset, streams one JSON line per preset to stderr as it ends (what
``paper_check_summary.py`` reads when a time limit stops this script) and prints one JSON object at the end:
``{"device", "plans": [{"name", "runs", "groups", "projected_seconds", "device", "upper_bound", "error"}]}``.
The presets are planned in ``paper_check.sh``'s order of value per GPU-minute, then the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FIRST = ["seed001-depth", "seed001-heads", "seed004-induction", "seed002-circuits", "seed002-emergence",
         "seed003-dyck"]  # paper_check.sh's steps, in its order


def presets_in_order() -> list[str]:
    """Every preset (each has a paper scale; one without is planned as an error line), FIRST first."""
    from depthlab.sweeps.presets import preset_names

    names = preset_names()
    return [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]


def plan_one(name: str, device: str, seconds: float) -> dict[str, Any]:
    """One preset's paper-scale plan (its error, as one line, when it cannot be planned)."""
    from depthlab.api.reproduce import plan
    from depthlab.errors import UserError

    try:
        return plan(name, "paper", max_seconds=seconds, train__device=device)
    except (UserError, RuntimeError, ValueError, MemoryError) as error:  # one preset's failure; the others go on
        return {"preset": name, "error": f"{type(error).__name__}: {error}".splitlines()[0]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for one NAME.json per preset")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per preset before the remaining "
                        "shapes are estimated (--plan-seconds)")
    parser.add_argument("--presets", default="", help="comma-separated names (default: every preset with a paper "
                        "scale)")
    args = parser.parse_args(argv)
    from depthlab.cli.common import setup_threads

    setup_threads()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [n for n in args.presets.split(",") if n] or presets_in_order():
        planned = plan_one(name, args.device, args.seconds)
        (args.out / f"{name}.json").write_text(json.dumps(planned, indent=1) + "\n")
        row = {"name": name, **{k: planned.get(k) for k in ("runs", "groups", "projected_seconds", "device",
                                                            "upper_bound", "error")}}
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    result = {"device": args.device, "plans": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
