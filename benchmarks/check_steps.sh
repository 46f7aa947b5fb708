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
    echo "$name (at most ${limit} s): $command"
  done
}

# one step under its time limit: its output in OUT/NAME.out and .err, its wall time and exit code a line of
# OUT/steps.jsonl (SIGTERM first: depthlab checkpoints the runs still training and stops)
timed_step() {
  local name=$1 limit=$2 command=$3 begin end rc
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
