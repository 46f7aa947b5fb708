# What gpu_check.sh and paper_check.sh share (sourced, not run): CHECK (the script's name, for messages), PY (the
# interpreter) and OUT (the output folder) are set by the script that sources it.

# pydantic, from DEPTHLAB_WHEELS with pip --no-index when it is missing (nothing comes from the network)
need_pydantic() {
  "$PY" -c "import pydantic" 2> /dev/null && return 0
  if [ -n "${DEPTHLAB_WHEELS:-}" ] && [ -d "$DEPTHLAB_WHEELS" ]; then
    "$PY" -m pip install --no-index --find-links "$DEPTHLAB_WHEELS" pydantic > "$OUT/pip.log" 2>&1 \
      || { echo "$CHECK: installing pydantic from $DEPTHLAB_WHEELS failed (see $OUT/pip.log)" >&2; exit 2; }
  else
    echo "$CHECK: pydantic is missing; set DEPTHLAB_WHEELS to a folder of its wheels (README, GPUs)" >&2
    exit 2
  fi
}

# a fresh start in OUT: the given folders removed (fresh stores: runs already done would be skipped, not timed),
# an empty steps.jsonl, pydantic at hand
start_check() {
  mkdir -p "$OUT"
  rm -rf "$@"
  : > "$OUT/steps.jsonl"
  need_pydantic
}

# the "name|limit|command" steps ONLY_STEPS names (comma-separated; all when it is unset), into the array STEPS
select_steps() {
  local step
  STEPS=()
  for step in "$@"; do
    if [ -z "${ONLY_STEPS:-}" ] || [[ ",$ONLY_STEPS," == *",${step%%|*},"* ]]; then STEPS+=("$step"); fi
  done
}

# a step's limit: its own, or STEP_LIMITS' (name=seconds, comma-separated: what one lent GPU's session can give),
# cut to what is left before DEADLINE (seconds since the epoch, 15 s kept for the summary; 0 when nothing is left)
step_limit() {
  local name=$1 limit=$2 pair left asked=${STEP_LIMITS:-}
  for pair in ${asked//,/ }; do
    if [ "${pair%%=*}" = "$name" ]; then limit=${pair#*=}; fi
  done
  if [ -n "${DEADLINE:-}" ]; then
    left=$(( ${DEADLINE%.*} - $(date +%s) - 15 ))
    if [ "$left" -lt "$limit" ]; then limit=$(( left > 0 ? left : 0 )); fi
  fi
  echo "$limit"
}

# every "name|limit|command" step, each under its limit
run_steps() {
  local step name limit command
  for step in "$@"; do
    IFS='|' read -r name limit command <<< "$step"
    timed_step "$name" "$limit" "$command"
  done
}

# each "name|limit|command" step, one line (--dry-run)
show_steps() {
  local step name limit command
  for step in "$@"; do
    IFS='|' read -r name limit command <<< "$step"
    echo "$name (at most $(step_limit "$name" "$limit") s): $command"
  done
}

# one step under its time limit: its output in OUT/NAME.out and .err, its wall time and exit code a line of
# OUT/steps.jsonl (SIGTERM first: depthlab checkpoints the runs still training and stops)
timed_step() {
  local name=$1 limit command=$3 begin end rc
  limit=$(step_limit "$name" "$2")
  if [ "$limit" -lt 5 ]; then  # DEADLINE reached: the step is recorded as skipped, not run
    echo "$CHECK: $name skipped (the deadline)" >&2
    "$PY" -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "command": sys.argv[2], "limit_s": 0,
"seconds": 0, "exit_code": None, "timed_out": False, "skipped": "deadline"}))' "$name" "$command" >> "$OUT/steps.jsonl"
    return
  fi
  echo "$CHECK: $name (at most ${limit} s)" >&2
  begin=$(date +%s.%N)
  # shellcheck disable=SC2086  # the command is split into words on purpose
  timeout --signal=TERM --kill-after=15 "$limit" $command > "$OUT/$name.out" 2> "$OUT/$name.err"
  rc=$?
  end=$(date +%s.%N)
  "$PY" -c 'import json, sys; n, c, l, b, e, r = sys.argv[1:]; print(json.dumps({"name": n, "command": c,
"limit_s": int(l), "seconds": round(float(e) - float(b), 2), "exit_code": int(r), "timed_out": int(r) in (124, 137)}))' \
    "$name" "$command" "$limit" "$begin" "$end" "$rc" >> "$OUT/steps.jsonl"
}
