#!/usr/bin/env bash
# One lent GPU's session in one command: gpu_check.sh's and paper_check.sh's steps in order of value, fitted to a
# deadline, everything under one folder and in one archive (what the device tool brings back: a few files).
#
#   bash benchmarks/lent_gpu.sh [OUT]             # OUT defaults to out/lent-gpu; BUDGET seconds (default 540)
#   bash benchmarks/lent_gpu.sh --small [OUT]     # the same path on the CPU at tiny sizes (checks this script)
#
# Order (2026-11-28: seed001-depth's paper scale ran whole on an H200, so it is not repeated):
#   1. gpu_check: pytest-gpu (what changed since the last loan runs on CUDA first), compiled and compiled-ops
#      (issue 45: retrieval's step compiled inside the CUDA graph against the eager one; never measured yet),
#      families (throughput ran then)
#   2. paper_check: plans (every preset's GPU minutes), ictm3-long, seed001-heads, seed004-induction,
#      seed002-circuits, seed002-emergence, the Dyck sweeps
# Each step keeps its own limit, cut to what is left before the deadline (benchmarks/check_steps.sh). Writes
# OUT/gpu/, OUT/paper/ and OUT/lent-gpu.tgz (without checkpoints), and prints both summaries' paths.
set -u

SMALL=()
OUT=out/lent-gpu
for arg in "$@"; do
  case "$arg" in
    --small) SMALL=(--small) ;;
    -*) echo "lent_gpu: unknown option $arg; allowed: --small, then the output folder" >&2; exit 2 ;;
    *) OUT=$arg ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUDGET=${BUDGET:-540}
case "$BUDGET" in
  ''|*[!0-9]*) echo "lent_gpu: BUDGET must be a whole number of seconds (got '$BUDGET')" >&2; exit 2 ;;
esac
export DEADLINE=$(( $(date +%s) + BUDGET ))
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

ONLY_STEPS=pytest-gpu,compiled,compiled-ops,families \
  STEP_LIMITS=${GPU_LIMITS:-pytest-gpu=150,compiled=120,compiled-ops=60,families=90} \
  bash "$ROOT/benchmarks/gpu_check.sh" "${SMALL[@]}" "$OUT/gpu" > "$OUT/gpu.log" 2>&1
ONLY_STEPS=plans,ictm3-long,seed001-heads,seed004-induction,seed002-circuits,seed002-emergence,dyck-tf1-N50,dyck-tf1-N100 \
  bash "$ROOT/benchmarks/paper_check.sh" "${SMALL[@]}" "$OUT/paper" > "$OUT/paper.log" 2>&1
tar czf "$OUT/lent-gpu.tgz" --exclude=artifacts -C "$OUT" gpu paper gpu.log paper.log
echo "{\"gpu_check\": \"$OUT/gpu/gpu_check.json\", \"paper_check\": \"$OUT/paper/paper_check.json\", \"archive\": \"$OUT/lent-gpu.tgz\"}"
