#!/usr/bin/env bash
# The seeds at their own scale on one lent GPU (issue 43): within 9 minutes, offline, from a plain checkout.
#
#   bash benchmarks/paper_check.sh [OUT]            # OUT defaults to out/paper-check; summary: OUT/paper_check.json
#   bash benchmarks/paper_check.sh --small [OUT]    # the same path on the CPU at tiny sizes (checks this script)
#   bash benchmarks/paper_check.sh --dry-run        # print the steps and their time limits, run nothing
#
# (a) Plans: what `depthlab reproduce NAME --scale paper --plan --device cuda --json` prints, for every preset, in
#     one process (benchmarks/plan_presets.py; each preset's projected GPU time: docs/results/paper-scale.md).
# (b) Paper scales, in order of value per GPU-minute (docs/results/paper-scale.md says why this order), each under
#     its own time limit into a fresh store, figures under OUT/figures:
#       seed001-depth       seed 001 Figure 2, the study whose paper scale disagreed on the GPU (issue 43)
#       ictm3-long          its IC-TM at 3 layers, 100,000 steps, seeds 3-5 (experiments/seed001-paper-recipe)
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
# PYTHON picks the interpreter (python3). ONLY_STEPS (step names, comma-separated: plans, seed001-depth, …) runs
# only those steps; PLAN_PRESETS (preset names, comma-separated) plans only those presets (--small: seed001-depth
# unless given); STEP_LIMITS (name=seconds, comma-separated) and DEADLINE (seconds since the epoch) fit the steps
# to what one lent GPU's session can give (benchmarks/check_steps.sh).
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
         [seed002-emergence]="" [ictm3-long]="--set sweep.seed=[3] --set task.n_symbols=8 --set task.n_a=8" [dyck]="--set task.eval_size=64 --set sweep.train.lr=[0.001] --set sweep.model.heads=[4] --set model.width=16")
  DYCK_N=(8 12)
  PLAN_SECONDS=1
  PLAN_PRESETS=${PLAN_PRESETS:-seed001-depth}  # one preset's plan: each builds the preset's paper-size data
  LIMITS=(300 300 300 300 300 300 300 300 300)  # a shared CPU can be slow; the script, not the timing, is checked
else
  DEVICE=cuda
  SCALE=paper
  TINY=""
  SMALL=()
  DYCK_N=(50 100)
  PLAN_SECONDS=3
  # the plans of 18 presets in one process, then the paper scales, each start-up included: 525 s, so that the
  # check ends within 9 minutes
  LIMITS=(75 120 120 60 40 35 35 20 20)
fi
RUN="--device $DEVICE --workers-per-device auto"
REPRODUCE="$DL reproduce --scale $SCALE $RUN --out $OUT/figures --json $TINY"
DYCK="$DL sweep experiments/paper/dyck-tf1.yaml $RUN --json $TINY ${SMALL[dyck]:-}"

STEPS_ALL=(
  "plans|${LIMITS[0]}|$PY benchmarks/plan_presets.py $OUT/plans --device $DEVICE --seconds $PLAN_SECONDS --presets=${PLAN_PRESETS:-}"
  "seed001-depth|${LIMITS[1]}|$REPRODUCE seed001-depth --store $OUT/stores/seed001-depth ${SMALL[seed001-depth]:-}"
  "ictm3-long|${LIMITS[2]}|$DL sweep experiments/seed001-paper-recipe/ictm3-long.yaml $RUN --json $TINY ${SMALL[ictm3-long]:-} --store $OUT/stores/ictm3-long"
  "seed001-heads|${LIMITS[3]}|$REPRODUCE seed001-heads --store $OUT/stores/seed001-heads ${SMALL[seed001-heads]:-}"
  "seed004-induction|${LIMITS[4]}|$REPRODUCE seed004-induction --store $OUT/stores/seed004-induction ${SMALL[seed004-induction]:-}"
  "seed002-circuits|${LIMITS[5]}|$REPRODUCE seed002-circuits --store $OUT/stores/seed002-circuits ${SMALL[seed002-circuits]:-}"
  "seed002-emergence|${LIMITS[6]}|$REPRODUCE seed002-emergence --store $OUT/stores/seed002-emergence ${SMALL[seed002-emergence]:-}"
  "dyck-tf1-N50|${LIMITS[7]}|$DYCK --set sweep.task.N=[${DYCK_N[0]}] --store $OUT/stores/dyck-tf1-N50"
  "dyck-tf1-N100|${LIMITS[8]}|$DYCK --set sweep.task.N=[${DYCK_N[1]}] --store $OUT/stores/dyck-tf1-N100"
)
# shellcheck source=benchmarks/check_steps.sh
CHECK=paper_check
source "$ROOT/benchmarks/check_steps.sh"
select_steps "${STEPS_ALL[@]}"
if [ "$DRY" = 1 ]; then
  show_steps "${STEPS[@]}"
  exit 0
fi

start_check "$OUT/stores" "$OUT/figures" "$OUT/plans"
started=$(date +%s.%N)
run_steps "${STEPS[@]}"
finished=$(date +%s.%N)
"$PY" benchmarks/paper_check_summary.py "$OUT" "$MODE" "$started" "$finished"
