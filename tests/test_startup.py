"""Start-up: ``depthlab --help`` and ``depthlab tasks`` import neither torch, matplotlib nor pandas (issue 46:
they took 8–15 s of wall time when every command imported them; benchmarks/startup_time.py measures the time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
SCRIPT = """
import sys
import depthlab.cli
for args in (["--help"], ["tasks"], ["tasks", "--json"]):
    sys.argv = ["depthlab", *args]
    try:
        depthlab.cli.main()
    except SystemExit:
        pass
print("imported:", *(m for m in ("torch", "matplotlib", "pandas") if m in sys.modules), file=sys.stderr)
"""


def test_help_and_tasks_import_no_heavy_library():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("DEPTHLAB_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    assert "Usage" in out.stdout and '"name": "icqa"' in out.stdout, out.stdout[-300:]
    assert out.stderr.strip().splitlines()[-1] == "imported:", out.stderr[-300:]
