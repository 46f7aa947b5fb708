"""The throughput benchmark on two revisions of depthlab, interleaved: is a change slower?

    python benchmarks/compare_revisions.py BASE_REV [--case icqa-quick] [--runs 1,16] [--rounds 6] [--json]

Checks BASE_REV out into a temporary git worktree and runs ``depthlab bench`` (one round each) alternately on it
and on this working tree, in fresh processes, ``--rounds`` times (the order flips every round). This machine's
speed drifts by ±15 % within minutes; alternating puts the drift into both sides alike, and the medians and the
per-round ratios (this tree ÷ base, measured minutes apart at most) say whether the change moved the rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
BENCH = "import sys; from depthlab.cli import main; sys.argv = ['depthlab', 'bench', *sys.argv[1:]]; main()"


def bench(tree: Path, case: str, runs: str, seconds: float) -> dict[tuple[str, int], float]:
    """Engine examples/s per (precision, group size) from one round of ``depthlab bench`` on ``tree``'s source."""
    out = subprocess.run([sys.executable, "-c", BENCH, "--case", case, "--runs", runs, "--rounds", "1",
                          "--seconds", str(seconds), "--json"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(tree / "src")})
    rows = json.loads(out.stdout)["cases"]
    return {(r["precision"], r["runs"]): r["engine_examples_per_s"] for r in rows} | {
        (r["precision"], 0): r["plain_examples_per_s"] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("--case", default="icqa-quick")
    parser.add_argument("--runs", default="1,16")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-q", str(base), args.base], check=True)
        try:
            rounds: list[tuple[dict, dict]] = []
            for i in range(args.rounds):
                order = [("base", base), ("this", HERE)] if i % 2 == 0 else [("this", HERE), ("base", base)]
                measured = {name: bench(tree, args.case, args.runs, args.seconds) for name, tree in order}
                rounds.append((measured["base"], measured["this"]))
                if not args.json:
                    print(f"round {i + 1}: " + ", ".join(f"{k[0]} R={k[1] or 'plain'}: {measured['this'][k] / v:.3f}"
                                                        for k, v in measured["base"].items()), file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base)], check=True)
    result = {"base": args.base, "case": args.case, "rounds": args.rounds, "rows": []}
    for key in rounds[0][0]:
        old, new = [r[0][key] for r in rounds], [r[1][key] for r in rounds]
        result["rows"].append({"precision": key[0], "runs": key[1] or "plain loop",
                               "base_examples_per_s": round(statistics.median(old)),
                               "this_examples_per_s": round(statistics.median(new)),
                               "ratio_of_medians": round(statistics.median(new) / statistics.median(old), 3),
                               "median_round_ratio": round(statistics.median(n / o for o, n in zip(old, new,
                                                                                                   strict=True)), 3)})
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
