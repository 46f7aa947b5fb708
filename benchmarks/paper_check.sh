#!/usr/bin/env bash
# The seeds at their own scale on one lent GPU (issue 43): within 9 minutes, offline, from a plain checkout.
#
#   bash benchmarks/paper_check.sh [OUT]            # OUT defaults to out/paper-check; summary: OUT/paper_check.json
#   bash benchmarks/paper_check.sh --small [OUT]    # the same path on the CPU at tiny sizes (checks this script)
#   bash benchmarks/paper_check.sh --dry-run        # print the steps and their time limits, run nothing
#
# (a) Plans: `depthlab reproduce NAME --scale paper --plan --device cuda --json` for every preset with a paper scale
#     (each preset's projected GPU time: docs/results/paper-scale.md's table).
# (b) Paper scales, in order of value per GPU-minute (docs/results/paper-scale.md says why this order), each under
#     its own time limit into a fresh store, figures under OUT/figures:
#       seed001-depth       seed 001 Figure 2, the study whose paper scale disagreed on the GPU (issue 43)
#       seed001-heads       seed 001 Figures 4-7 at §9.1's sizes, IC-TM with k = 2 and 4
#       seed004-induction   seed 004's induction-head strengths
#       seed002-circuits    seed 002 Figure 5
#       seed002-emergence   seed 002 Figures 6-7
#       dyck-tf1-N50/N100   seed 003 Dyck, TF(1, 256) over App. H's learning rates (experiments/paper/dyck-tf1.yaml)
#     A step stopped by its limit is checkpointed and marked interrupted (SIGTERM: depthlab's graceful stop); its
#     finished runs are in its store, and its JSON is what the command printed before it was stopped.
#
# Nothing is installed from the network. depthlab runs from src/ (PYTHONPATH=src); when pydantic is missing and
# DEPTHLAB_WHEELS names a folder of its wheels, they are installed from it with pip --no-index (as gpu_check.sh).
# PYTHON picks the interpreter (python3). ONLY_STEPS (step names, comma-separated) runs only those steps;
# PLAN_PRESETS (preset names, comma-separated) plans only those presets (--small: seed001-depth unless given).
set -u

MODE=full
DRY=0
OUT=out/paper-check
for arg in "$@"; do
  case "$arg" in
    --small) MODE=small ;;
    --dry-run) DRY=1 ;;
    -*) echo "paper_check: unknown option $arg; allowed: --small, --dry-run, then the output folder" >&2; exit 2 ;;
    *) OUT=$arg ;;
  esac
done
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
DL="$PY -m depthlab.cli"
declare -A SMALL

if [ "$MODE" = small ]; then
  DEVICE=cpu
  SCALE=quick  # paper sizes on the CPU would build the paper's evaluation sets; the path is what is checked
  TINY="--set train.steps=4 --set train.eval_every=2 --set train.eval_examples=32"
  # one seed, one depth: each preset's own grid fields
  SMALL=([seed001-depth]="--set sweep.seed=[0] --set sweep.model.layers=[1]" [seed001-heads]="--set sweep.seed=[0]"
         [seed004-induction]="--set sweep.model.layers=[1]" [seed002-circuits]="--set sweep.seed=[0]"
         [seed002-emergence]="" [dyck]="--set task.eval_size=64 --set sweep.train.lr=[0.001] --set sweep.model.heads=[4] --set model.width=16")
  DYCK_N=(8 12)
  PLAN_ARGS="--plan-seconds 1"
  PLAN_LIMIT=120
  PLAN_PRESETS=${PLAN_PRESETS:-seed001-depth}  # one preset's plan: each takes seconds of start-up on the CPU
  LIMITS=(300 300 300 300 300 300 300)  # a shared CPU can be slow; the script, not the timing, is checked
else
  DEVICE=cuda
  SCALE=paper
  TINY=""
  SMALL=()
  DYCK_N=(50 100)
  PLAN_ARGS="--plan-seconds 3"
  PLAN_LIMIT=13  # each preset's plan; 18 presets: at most 234 s
  LIMITS=(70 50 35 35 35 25 25)  # 275 s of runs, each start-up included: plans and runs end within 9 minutes
fi
RUN="--device $DEVICE --workers-per-device auto"
REPRODUCE="$DL reproduce --scale $SCALE $RUN --out $OUT/figures --json $TINY"
DYCK="$DL sweep experiments/paper/dyck-tf1.yaml $RUN --json $TINY ${SMALL[dyck]:-}"

STEPS_ALL=(
  "seed001-depth|${LIMITS[0]}|$REPRODUCE seed001-depth --store $OUT/stores/seed001-depth ${SMALL[seed001-depth]:-}"
  "seed001-heads|${LIMITS[1]}|$REPRODUCE seed001-heads --store $OUT/stores/seed001-heads ${SMALL[seed001-heads]:-}"
  "seed004-induction|${LIMITS[2]}|$REPRODUCE seed004-induction --store $OUT/stores/seed004-induction ${SMALL[seed004-induction]:-}"
  "seed002-circuits|${LIMITS[3]}|$REPRODUCE seed002-circuits --store $OUT/stores/seed002-circuits ${SMALL[seed002-circuits]:-}"
  "seed002-emergence|${LIMITS[4]}|$REPRODUCE seed002-emergence --store $OUT/stores/seed002-emergence ${SMALL[seed002-emergence]:-}"
  "dyck-tf1-N50|${LIMITS[5]}|$DYCK --set sweep.task.N=[${DYCK_N[0]}] --store $OUT/stores/dyck-tf1-N50"
  "dyck-tf1-N100|${LIMITS[6]}|$DYCK --set sweep.task.N=[${DYCK_N[1]}] --store $OUT/stores/dyck-tf1-N100"
)
STEPS=()
for step in "${STEPS_ALL[@]}"; do
  name=${step%%|*}
  if [ -z "${ONLY_STEPS:-}" ] || [[ ",$ONLY_STEPS," == *",$name,"* ]]; then STEPS+=("$step"); fi
done

# shellcheck source=benchmarks/check_steps.sh
CHECK=paper_check
source "$ROOT/benchmarks/check_steps.sh"
if [ "$DRY" = 1 ]; then
  echo "plans: ${PLAN_PRESETS:-every preset with a paper scale}, each at most ${PLAN_LIMIT} s: $DL reproduce NAME --scale paper --plan --device $DEVICE $PLAN_ARGS --json"
  show_steps "${STEPS[@]}"
  exit 0
fi

start_check "$OUT/stores" "$OUT/figures"
mkdir -p "$OUT/plans"
started=$(date +%s.%N)
PRESETS=${PLAN_PRESETS:-$($PY -c 'import json, subprocess, sys
listing = json.loads(subprocess.run([sys.executable, "-m", "depthlab.cli", "reproduce", "--list", "--json"],
                                    capture_output=True, text=True, check=True).stdout)
print(",".join(p["name"] for p in listing["presets"] if "paper" in p["scales"]))')}
for preset in ${PRESETS//,/ }; do
  timed_step "plans/$preset" "$PLAN_LIMIT" "$DL reproduce $preset --scale paper --plan --device $DEVICE $PLAN_ARGS --json"
done
run_steps "${STEPS[@]}"
finished=$(date +%s.%N)
"$PY" benchmarks/paper_check_summary.py "$OUT" "$MODE" "$started" "$finished"
