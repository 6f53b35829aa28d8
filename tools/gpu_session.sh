#!/usr/bin/env bash
# One GPU session, one command: on the GPU host (repository root as the working
# directory, gpu_bundle/ from tools/gpu_bundle.sh carried along, $OUT a folder
# whose files come back), runs
#   1. tests       bash gpu_bundle/run_all.sh                 (every test binary, then
#                  the Python tests from grove's wheel installed into a fresh
#                  virtual environment of the host's python3)
#   2. benchmarks  bash gpu_bundle/run_all.sh --filter // --benchmarks (every
#                  benchmark, <name>.json + <name>.txt into $OUT/gpu_logs; the
#                  filter skips the tests, which ran in step 1, so that a slow
#                  test step cannot eat the benchmarks' time)
#   2b. host_copies  backend_latency again with GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0
#                  (backend_latency_host_copies.{json,txt}): the A/B that keeps
#                  in-graph input copies (Note [Input copies inside the graph])
#                  the default only while they win
#   3. torch       python3 benchmarks/compare_torch.py --json $OUT/gpu_logs/torch.json
#                  --iters 100 --warmup 10
#   4. results     python3 tools/write_results.py --logs $OUT/gpu_logs --out $OUT
# and leaves in $OUT: RESULTS.md, latency.png (when matplotlib exists),
# session.log (everything the steps printed) and gpu_logs.tar.gz (the logs and
# JSON), four files, well inside the 8 files the GPU tool brings back.
#
#   bash tools/gpu_session.sh
#
# Note [Session time budget]
# The whole session must end within the GPU tool's 10-minute command limit,
# so every step has a time limit and the session a deadline
# (GROVE_SESSION_BUDGET_S, default 510 s): a step gets its own limit or what is
# left before the deadline minus what later steps need, whichever is less. A
# step that runs past its limit is stopped (its whole process tree, by pid) and
# the session goes on; session.tsv records each step's status, exit code and
# time, and RESULTS.md says which step failed or timed out. The last step,
# writing RESULTS.md, may run up to 30 s past the deadline, so the session ends
# within about 9 minutes even when every step uses its whole limit. Limits (seconds):
# GROVE_TESTS_LIMIT_S (240), GROVE_BENCHMARKS_LIMIT_S (200),
# GROVE_HOST_COPIES_LIMIT_S (45), GROVE_TORCH_LIMIT_S
# (180), GROVE_RESULTS_LIMIT_S (60); GROVE_TEST_TIMEOUT bounds each binary
# inside run_all.sh (default here 150). GROVE_BUNDLE_DIR, GROVE_PYTHON and
# GROVE_TORCH_SCRIPT replace gpu_bundle, python3 and benchmarks/compare_torch.py
# (tests/tools/gpu_session_test.sh uses them).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

budget=${GROVE_SESSION_BUDGET_S:-510}
bundle=${GROVE_BUNDLE_DIR:-gpu_bundle}
python=${GROVE_PYTHON:-python3}
torch_script=${GROVE_TORCH_SCRIPT:-benchmarks/compare_torch.py}
if [ -z "${OUT:-}" ]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/grove_session.XXXXXX")
  echo "gpu_session: OUT is not set; writing to $OUT"
fi
export OUT
logs="$OUT/gpu_logs"
mkdir -p "$logs" || { echo "gpu_session: cannot create $logs" >&2; exit 2; }
session="$logs/session.tsv"
log="$OUT/session.log"
# Nothing from an earlier session may pass for this one's.
rm -f "$OUT/RESULTS.md" "$OUT/latency.png" "$OUT/gpu_logs.tar.gz" "$logs"/*
: >"$session"
: >"$log"
start=$(date +%s)
deadline=$((start + budget))
failures=0

# The benchmarks alone: no test path contains "//", so the filter leaves the
# tests out (they ran in the tests step). run_all.sh's exit status counts
# binaries that did not build, tests included; this one fails when a
# benchmark failed or did not build.
benchmarks_only() {
  bash "$bundle/run_all.sh" --filter // --benchmarks
  local failed
  failed=$(grep -cE '^benchmark .* failed$|^FAIL +benchmarks/' "$logs/benchmarks.log")
  [ "$failed" -eq 0 ] || { echo "gpu_session: $failed benchmark(s) failed or did not build"; return 1; }
}

say() { echo "$*" | tee -a "$log"; }
record() { printf '%s\t%s\n' "$1" "$2" >>"$session"; }

# Every descendant of a pid, children before grandchildren (ps, or /proc where
# ps is missing).
children() {
  if command -v ps >/dev/null 2>&1; then
    ps -o pid= --ppid "$1" 2>/dev/null
    return
  fi
  local stat fields ppid
  for stat in /proc/[0-9]*/stat; do
    fields=$(cat "$stat" 2>/dev/null) || continue
    fields=${fields##*) }  # after "pid (comm) ": "state ppid ..."
    read -r _ ppid _ <<<"$fields"
    [ "$ppid" = "$1" ] && { stat=${stat#/proc/}; echo "${stat%/stat}"; }
  done
}
descendants() {
  local child
  for child in $(children "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# Stops a step: TERM to the step and every process under it, KILL a few
# seconds later to whatever is left (run_all.sh runs binaries under their own
# `timeout`, which leaves the step's process group, so the tree is walked).
stop_tree() {
  local pids
  pids="$1 $(descendants "$1")"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  sleep 3
  # shellcheck disable=SC2086,SC2046
  kill -KILL $pids $(descendants "$1") 2>/dev/null
}

# run_step NAME LIMIT_S RESERVE_S DISPLAY COMMAND...: runs COMMAND with its
# output in gpu_logs/NAME.log (and on the console), stopped after LIMIT_S or
# when less than RESERVE_S would be left for the later steps.
run_step() {
  local name=$1 limit=$2 reserve=$3 display=$4
  shift 4
  local left=$((deadline - $(date +%s) - reserve))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    say "== $name: skipped, the session's time budget (${budget}s) is spent"
    printf 'step\t%s\tskipped (no time left)\t-\t0\t0\t%s\n' "$name" "$display" >>"$session"
    failures=$((failures + 1))
    return
  fi
  say ""
  say "== $name (limit ${limit}s): $display"
  local step_log="$logs/$name.log" began status rc
  began=$(date +%s)
  : >"$step_log"
  "$@" >>"$step_log" 2>&1 &
  local pid=$!
  tail -n +1 -f --pid="$pid" "$step_log" &
  local tail_pid=$!
  status=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ $(($(date +%s) - began)) -ge "$limit" ]; then
      stop_tree "$pid"
      status="timed out after ${limit}s"
      break
    fi
    sleep 1
  done
  wait "$pid"
  rc=$?
  wait "$tail_pid" 2>/dev/null
  [ -z "$status" ] && { [ "$rc" -eq 0 ] && status="ok" || status="failed (exit $rc)"; }
  [ "$status" = "ok" ] || failures=$((failures + 1))
  cat "$step_log" >>"$log"
  local seconds=$(($(date +%s) - began))
  say "== $name: $status in ${seconds}s"
  printf 'step\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$seconds" "$limit" \
    "$display" >>"$session"
}

# Note [Steps a half bundle does not carry]: a bundle built with
# GROVE_BUNDLE_ONLY=benchmarks lists no tests (tests.txt and python_tests.txt
# exist and are empty), one built with =tests no benchmarks. Its missing step is
# recorded as "not in this bundle", which RESULTS.md does not count as a
# failure; the other half runs in its own call. A bundle without the lists
# (older, or a stand-in) runs every step. Test: tests/tools/gpu_session_test.sh.
carries_none() {
  local list
  for list in "$@"; do
    [ -f "$bundle/$list" ] && [ ! -s "$bundle/$list" ] || return 1
  done
}
not_in_bundle() {
  say ""
  say "== $1: not in this bundle (built with $3); run the other half in its own call"
  printf 'step\t%s\tnot in this bundle\t-\t0\t0\t%s\n' "$1" "$2" >>"$session"
}

commit=$(cat "$bundle/commit.txt" 2>/dev/null || echo unknown)
record started_utc "$(date -u '+%Y-%m-%d %H:%M UTC')"
record commit "$commit"
if command -v nvidia-smi >/dev/null 2>&1; then
  record nvidia_smi "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
fi
say "gpu_session: commit $commit, budget ${budget}s, logs in $logs"

if [ ! -f "$bundle/run_all.sh" ]; then
  say "gpu_session: $bundle/run_all.sh is missing; build the bundle with tools/gpu_bundle.sh" \
      "and carry gpu_bundle/ along"
  failures=$((failures + 2))
  printf 'step\ttests\tfailed (no bundle)\t-\t0\t0\tbash %s/run_all.sh\n' "$bundle" >>"$session"
  printf 'step\tbenchmarks\tfailed (no bundle)\t-\t0\t0\tbash %s/run_all.sh --benchmarks\n' \
    "$bundle" >>"$session"
else
  export GROVE_TEST_TIMEOUT=${GROVE_TEST_TIMEOUT:-150}
  if carries_none tests.txt python_tests.txt; then
    not_in_bundle tests "bash $bundle/run_all.sh" "GROVE_BUNDLE_ONLY=benchmarks"
  else
    run_step tests "${GROVE_TESTS_LIMIT_S:-240}" 150 "bash $bundle/run_all.sh" \
      bash "$bundle/run_all.sh"
  fi
  if carries_none benchmarks.txt; then
    not_in_bundle benchmarks "bash $bundle/run_all.sh --filter // --benchmarks" \
      "GROVE_BUNDLE_ONLY=tests"
    not_in_bundle host_copies \
      "GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0 bash $bundle/run_all.sh --benchmarks=backend_latency" \
      "GROVE_BUNDLE_ONLY=tests"
  else
    run_step benchmarks "${GROVE_BENCHMARKS_LIMIT_S:-200}" 135 \
      "bash $bundle/run_all.sh --filter // --benchmarks" benchmarks_only
    run_step host_copies "${GROVE_HOST_COPIES_LIMIT_S:-45}" 90 \
      "GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0 bash $bundle/run_all.sh --benchmarks=backend_latency" \
      env GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0 GROVE_BENCHMARK_SUFFIX=_host_copies \
      bash "$bundle/run_all.sh" --filter // --benchmarks=benchmarks/backend_latency/
  fi
fi
run_step torch "${GROVE_TORCH_LIMIT_S:-180}" 20 \
  "$python $torch_script --json \$OUT/gpu_logs/torch.json --iters 100 --warmup 10" \
  "$python" "$torch_script" --json "$logs/torch.json" --iters 100 --warmup 10
record finished_utc "$(date -u '+%Y-%m-%d %H:%M UTC')"

results_limit=${GROVE_RESULTS_LIMIT_S:-60}
# Writing RESULTS.md is never skipped: it gets at least 15 s, past the deadline if need be.
now=$(date +%s)
[ $((deadline + 30 - now)) -lt 15 ] && deadline=$((now - 15))
run_step results "$results_limit" -30 \
  "$python tools/write_results.py --logs \$OUT/gpu_logs --out \$OUT" \
  "$python" tools/write_results.py --logs "$logs" --out "$OUT" --commit-file "$bundle/commit.txt"
if [ ! -s "$OUT/RESULTS.md" ]; then
  # The writer failed: leave what the session knows, so the lead sees why.
  { echo "# grove benchmark results: NOT written"
    echo
    echo "tools/write_results.py failed in this session; its output:"
    echo
    echo '```'
    tail -40 "$logs/results.log" 2>/dev/null
    echo '```'
    echo
    echo "Session record (session.tsv):"
    echo
    echo '```'
    cat "$session"
    echo '```'; } >"$OUT/RESULTS.md"
  say "gpu_session: write_results failed; RESULTS.md says so"
fi

# Pack the logs: $OUT must hold few files (the GPU tool brings back 8, each at
# most 16 MiB). A log that would push the archive past 15 MiB keeps its tail.
pack() { tar -czf "$OUT/gpu_logs.tar.gz" -C "$OUT" gpu_logs; }
pack
if [ "$(stat -c %s "$OUT/gpu_logs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  for file in "$logs"/*; do
    if [ "$(stat -c %s "$file")" -gt $((2 * 1024 * 1024)) ]; then
      tail -c $((2 * 1024 * 1024)) "$file" >"$file.tail" && mv "$file.tail" "$file"
    fi
  done
  pack
fi
rm -rf "$logs"
say ""
say "gpu_session: done in $(($(date +%s) - start))s; in $OUT:"
(cd "$OUT" && ls -l) | tee -a "$log"
count=$(find "$OUT" -type f | wc -l)
[ "$count" -le 8 ] || say "gpu_session: warning: $count files in $OUT, more than the 8 that come back"
[ "$failures" -eq 0 ]
