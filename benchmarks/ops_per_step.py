"""ATen operations per training step of each bench case (torch.profiler; issue 29).

    python benchmarks/ops_per_step.py --json                 # icqa-quick, icqa-paper, retrieval at 1 and 16 runs
    python benchmarks/ops_per_step.py --runs 1,256 --device cuda --json   # on a GPU: kernels per step as well

Same as ``depthlab bench --ops``; prints one JSON object with ``--json``.
"""

import sys

from depthlab.cli import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "bench", "--ops", *sys.argv[1:]]
    main()
