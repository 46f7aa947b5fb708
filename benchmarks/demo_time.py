"""Time `make demo` on a fresh clone: venv creation, install, and the seed 001 depth study.

    python benchmarks/demo_time.py [--repo PATH] [--json]

Clones the repository (its committed HEAD) into a temporary folder so nothing installed here is reused,
runs `make demo` there, and prints the wall time of each phase.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=sys.stderr)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "depthlab"
        subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
        install = timed(["make", "install"], clone)
        study = timed(["make", "demo"], clone)
    result = {"install_s": round(install, 1), "study_s": round(study, 1), "total_s": round(install + study, 1)}
    print(json.dumps(result) if args.json else
          f"install {result['install_s']} s, study {result['study_s']} s, make demo in all {result['total_s']} s")


if __name__ == "__main__":
    main()
