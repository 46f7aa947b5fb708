"""The lent-GPU scripts' promises that hold without a GPU: ``gpu_check.sh`` fits in 8 minutes (issue 45), and a
wrong option is one line and exit code 2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def dry_run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_the_gpu_check_ends_within_8_minutes_whatever_its_steps_do():
    """The steps' limits add up to 8 minutes less the 15 s kept for the summary, and a deadline 8 minutes away
    cuts them when none is given (a DEADLINE already past leaves every step at 0 s)."""
    out = dry_run("--dry-run")
    assert out.returncode == 0, out.stderr
    limits = [int(s) for s in re.findall(r"\(at most (\d+) s\)", out.stdout)]
    assert len(limits) == 7 and sum(limits) <= 480 - 15, limits
    past = dry_run("--dry-run", DEADLINE="1")
    assert re.findall(r"\(at most (\d+) s\)", past.stdout) == ["0"] * 7


def test_a_wrong_option_is_one_line_and_exit_code_2():
    out = dry_run("--fast")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "gpu_check: unknown option --fast; allowed: --small, --dry-run, then the output folder"]
