"""Throughput benchmark: the batched engine against a plain loop and the machine's matrix-multiply peak.

    python benchmarks/throughput.py --json            # all cases, groups of 1, 4, 16 and 64 runs
    python benchmarks/throughput.py --runs 16 --case icqa-paper
    python benchmarks/throughput.py --device cuda --runs 1,16,64,256 --json   # on a GPU: fp32 (TF32) and bf16

Same as ``depthlab bench``; prints one JSON object with ``--json``.
"""

import sys

from depthlab.cli import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "bench", *sys.argv[1:]]
    main()
