"""``benchmarks/paper_check.sh`` (issue 43): its steps and limits fit the 9 minutes of a lent GPU, and ``--small``
runs the same path on the CPU: a preset's plan, a preset's paper-scale step and the Dyck sweep file's step, into
fresh stores, with the JSON summary, the tables and the figures written under its output folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "paper_check.sh"
PRESETS_WITH_PAPER = 18  # `depthlab reproduce --list`: every preset has a paper scale


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=environment, check=False)


def test_the_gpu_steps_and_every_plan_fit_in_nine_minutes():
    shown = run("--dry-run")
    assert shown.returncode == 0, shown.stderr
    limits = [int(x) for x in re.findall(r"\(at most (\d+) s\)", shown.stdout)]
    names = [line.split(" (at most")[0] for line in shown.stdout.splitlines()]
    assert names == ["plans", "seed001-depth", "ictm3-long", "seed001-heads", "seed004-induction", "seed002-circuits",
                     "seed002-emergence", "dyck-tf1-N50", "dyck-tf1-N100"]  # the order of value per GPU-minute
    assert "--scale paper --device cuda" in shown.stdout and "sweep.task.N=[100]" in shown.stdout
    assert "plan_presets.py" in shown.stdout and "--device cuda" in shown.stdout.splitlines()[0]
    assert sum(limits) <= 9 * 60 - 15  # 15 s left for the summary


def test_a_session_narrows_the_steps_and_cuts_them_to_its_deadline():
    """ONLY_STEPS, STEP_LIMITS and DEADLINE (what one lent GPU's minutes allow): the named steps only, the asked
    limit, then every limit cut to what is left before the deadline (15 s kept for the summary)."""
    shown = run("--dry-run", ONLY_STEPS="plans,seed001-depth", STEP_LIMITS="seed001-depth=330")
    assert re.findall(r"^(\S+) \(at most (\d+) s\)", shown.stdout, re.M) == [("plans", "75"),
                                                                             ("seed001-depth", "330")]
    soon = str(int(time.time()) + 115)
    cut = run("--dry-run", ONLY_STEPS="seed001-depth", STEP_LIMITS="seed001-depth=330", DEADLINE=soon)
    assert 95 <= int(re.search(r"at most (\d+) s", cut.stdout).group(1)) <= 100


def test_small_runs_the_same_path_on_the_cpu(tmp_path):
    """One plan and two steps (a preset, the sweep file): about 25 s on a quiet machine, one thread each."""
    out = tmp_path / "check"
    done = run("--small", str(out), ONLY_STEPS="plans,seed001-depth,dyck-tf1-N50", PLAN_PRESETS="seed001-depth")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "paper_check.json").read_text())
    assert summary["mode"] == "small" and [s["exit_code"] for s in summary["steps"]] == [0, 0, 0], summary["steps"]
    plan = summary["plans"][0]
    assert plan["preset"] == "seed001-depth" and plan["device"] == "cpu" and plan["minutes"] > 0 and plan["runs"] == 39
    for step in ("seed001-depth", "dyck-tf1-N50"):
        runs = summary["runs"][step]
        assert runs and all(r["status"] == "done" and r["eval_protocol"] for r in runs), runs
    assert summary["results"]["seed001-depth"]["rows"][0]["shows"] == "final"
    assert any((out / "figures").glob("*.png"))
    tables = (out / "tables.md").read_text()
    assert "| seed001-depth | 39 | cpu |" in tables and "**dyck-tf1-N50**" in tables
