#!/usr/bin/env bash
# The runner that tools/gpu_bundle.sh puts at gpu_bundle/run_all.sh: on a GPU
# host, runs every test binary of the bundle (their cuda instances run there),
# then the Python tests with the host's python3 (grove from the bundle's wheel,
# installed into a fresh virtual environment), prints one line per binary
# and a total "N passed, N failed" line, and exits non-zero when any failed.
#
#   bash gpu_bundle/run_all.sh [--benchmarks[=SUBSTRING]] [--filter SUBSTRING]
#
# --benchmarks also runs each benchmark binary (or those whose path contains
# SUBSTRING) with --json <logs>/<name>.json (<name><suffix>.json when
# GROVE_BENCHMARK_SUFFIX is set: a second run of a benchmark under another
# configuration keeps the first run's files).
# Logs go to $OUT/gpu_logs when OUT is set (else a temporary directory): the
# full output of every failed binary in failures.log, and each benchmark's
# table and JSON. GROVE_TEST_TIMEOUT bounds
# each binary (seconds, default 300).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run_benchmarks=0
benchmark_filter=""
filter=""
while [ $# -gt 0 ]; do
  case "$1" in
    --benchmarks) run_benchmarks=1 ;;
    --benchmarks=*) run_benchmarks=1; benchmark_filter=${1#--benchmarks=} ;;
    --filter) filter=$2; shift ;;
    *) echo "run_all.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

tree=$here
if [ -f "$here/payload.tar.xz" ]; then
  tree=$(mktemp -d "${TMPDIR:-/tmp}/grove_bundle.XXXXXX")
  tar -C "$tree" -xJf "$here/payload.tar.xz" || { echo "run_all.sh: cannot unpack payload" >&2; exit 2; }
fi
# Debian libraries the GPU host may lack (gRPC, protobuf and what they load),
# carried by gpu_bundle.sh beside the tree.
if [ -d "$tree/grove/_syslib" ]; then
  export LD_LIBRARY_PATH="$tree/grove/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -n "${OUT:-}" ]; then
  logs="$OUT/gpu_logs"
else
  logs=$(mktemp -d "${TMPDIR:-/tmp}/grove_logs.XXXXXX")
fi
mkdir -p "$logs"
scratch_logs=$(mktemp -d "${TMPDIR:-/tmp}/grove_test_logs.XXXXXX")
timeout_s=${GROVE_TEST_TIMEOUT:-300}

echo "grove GPU run: commit $(cat "$here/commit.txt" 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
fi

# Counts gtest's per-case result lines in a log.
count_lines() { grep -c -- "$1" "$2" 2>/dev/null || true; }

binaries_passed=0
binaries_failed=0
cases_passed=0
cases_failed=0
cases_skipped=0
failed_names=()
while read -r path; do
  [ -n "$path" ] || continue
  case "$path" in *"$filter"*) ;; *) continue ;; esac
  name=$(basename "$path")
  log="$scratch_logs/$name.log"
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/grove_test.XXXXXX")
  start=$(date +%s.%N)
  # The test's `env` attribute, as gpu_bundle.sh wrote it (KEY=VALUE lines).
  test_env=()
  [ -f "$tree/grove/$path.env" ] && mapfile -t test_env <"$tree/grove/$path.env"
  (cd "$tree/grove" && env "${test_env[@]}" TEST_SRCDIR="$tree" TEST_WORKSPACE=grove \
    TEST_TMPDIR="$scratch" timeout "$timeout_s" "./$path") >"$log" 2>&1
  status=$?
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  rm -rf "$scratch"
  ok=$(count_lines '^\[       OK \]' "$log")
  bad=$(count_lines '^\[  FAILED  \] .*(' "$log")
  skipped=$(count_lines '^\[  SKIPPED \] .*(' "$log")
  cases_passed=$((cases_passed + ok))
  cases_failed=$((cases_failed + bad))
  cases_skipped=$((cases_skipped + skipped))
  if [ "$status" -eq 0 ]; then
    binaries_passed=$((binaries_passed + 1))
    verdict="PASS"
  else
    binaries_failed=$((binaries_failed + 1))
    failed_names+=("$path")
    verdict="FAIL"
    [ "$status" -eq 124 ] && verdict="FAIL (timed out after ${timeout_s}s)"
  fi
  printf '%-5s %-52s %4d passed %3d failed %3d skipped  %6ss\n' "${verdict%% *}" "$path" \
    "$ok" "$bad" "$skipped" "$seconds"
  if [ "$verdict" != "PASS" ]; then
    [ "$verdict" != "FAIL" ] && echo "      $verdict"
    grep -E '^\[  FAILED  \].*\(|Failure|error:' "$log" | head -8 | sed 's/^/      /'
    tail -3 "$log" | sed 's/^/      | /'
    { echo "===== $path (exit $status)"; cat "$log"; } >>"$logs/failures.log"
  fi
done <"$here/tests.txt"

# "passed failed skipped" of a unittest log, from its summary ("Ran N tests",
# then "OK (skipped=K)" or "FAILED (failures=F, errors=E, skipped=K)"): a case
# whose "... ok" a warning split from its name still counts. A log without a
# summary (the process died) counts its case lines.
python_case_counts() {
  local ran status failed skipped
  ran=$(grep -oE '^Ran [0-9]+ tests?' "$1" | tail -1 | awk '{print $2}')
  status=$(grep -E '^(OK|FAILED)( \(.*\))?$' "$1" | tail -1)
  if [ -z "$ran" ] || [ -z "$status" ]; then
    echo "$(count_lines ' \.\.\. ok$' "$1") $(grep -cE ' \.\.\. (FAIL|ERROR)$' "$1" || true)" \
      "$(count_lines ' \.\.\. skipped' "$1")"
    return
  fi
  field() { echo "$status" | grep -oE "$1=[0-9]+" | cut -d= -f2 | awk '{s += $1} END {print s + 0}'; }
  failed=$(($(field failures) + $(field errors) + $(field 'unexpected successes')))
  skipped=$(field skipped)
  echo "$((ran - failed - skipped)) $failed $skipped"
}

# The Python side runs from grove's wheel (gpu_bundle.sh puts it in
# grove/wheel/), installed into a fresh virtual environment of the host's
# python3 that sees the host's PyTorch (--system-site-packages), the way a user
# gets grove: nothing of python/ is on the path. The environment takes no pip
# of its own (--without-pip: the host's pip installs into it, offline). Where
# python3 cannot make one, pip installs the wheel into a folder on PYTHONPATH.
# A wheel that does not install counts as one failed binary.
python_bin=python3
python_path="$tree/grove/tests/python_support"
wheel=$(ls "$tree"/grove/wheel/grove-*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ] && [ -s "$here/python_tests.txt" ]; then
  venv="$scratch_logs/venv"
  install_log="$scratch_logs/wheel_install.log"
  if python3 -m venv --system-site-packages --without-pip "$venv" >"$install_log" 2>&1 &&
     { "$venv/bin/python" -m pip install --no-index --no-deps --quiet "$wheel" ||
       python3 -m pip --python "$venv/bin/python" install --no-index --no-deps --quiet "$wheel"; \
     } >>"$install_log" 2>&1; then
    # A host python3 that is itself a virtual environment (or has packages on
    # PYTHONPATH) gives --system-site-packages only its base interpreter's:
    # the host's path goes into the environment after its own site-packages,
    # so the wheel's grove comes first and the host's PyTorch is seen.
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    python3 -c 'import sys; print("\n".join(p for p in sys.path if p))' >"$site/_host_python.pth"
    python_bin="$venv/bin/python"
    echo "Python tests: $(basename "$wheel") installed into $venv"
  elif python3 -m pip install --no-index --no-deps --quiet --target "$scratch_logs/site" "$wheel" \
       >>"$install_log" 2>&1; then
    python_path="$scratch_logs/site:$python_path"
    echo "Python tests: no virtual environment here; $(basename "$wheel") installed into $scratch_logs/site"
  else
    binaries_failed=$((binaries_failed + 1))
    failed_names+=("$(basename "$wheel")")
    printf '%-5s %-52s (pip could not install it)\n' "FAIL" "$(basename "$wheel")"
    tail -5 "$install_log" | sed 's/^/      | /'
    { echo "===== $(basename "$wheel") (install)"; cat "$install_log"; } >>"$logs/failures.log"
  fi
fi

# The Python tests (issue 19), with the host's python3 and its PyTorch; each
# unittest case counts like a gtest case.
while read -r path; do
  [ -n "$path" ] || continue
  case "$path" in *"$filter"*) ;; *) continue ;; esac
  name=$(basename "$path" .py)
  log="$scratch_logs/$name.log"
  start=$(date +%s.%N)
  (cd "$tree/grove" && env -u GROVE_LIBRARY TEST_SRCDIR="$tree" PYTHONPATH="$python_path" \
    timeout "$timeout_s" "$python_bin" "$path") >"$log" 2>&1
  status=$?
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  read -r ok bad skipped < <(python_case_counts "$log")
  cases_passed=$((cases_passed + ok))
  cases_failed=$((cases_failed + bad))
  cases_skipped=$((cases_skipped + skipped))
  if [ "$status" -eq 0 ]; then
    binaries_passed=$((binaries_passed + 1))
    verdict="PASS"
  else
    binaries_failed=$((binaries_failed + 1))
    failed_names+=("$path")
    verdict="FAIL"
    grep -E '^(FAIL|ERROR):|Error' "$log" | head -8 | sed 's/^/      /'
    { echo "===== $path (exit $status)"; cat "$log"; } >>"$logs/failures.log"
  fi
  printf '%-5s %-52s %4d passed %3d failed %3d skipped  %6ss\n' "$verdict" "$path" \
    "$ok" "$bad" "$skipped" "$seconds"
done < <(cat "$here/python_tests.txt" 2>/dev/null)

while read -r path; do
  [ -n "$path" ] || continue
  binaries_failed=$((binaries_failed + 1))
  failed_names+=("$path")
  printf '%-5s %-52s (did not build when the bundle was made)\n' "FAIL" "$path"
done <"$here/not_built.txt"

if [ "$run_benchmarks" -eq 1 ]; then
  while read -r path; do
    [ -n "$path" ] || continue
    case "$path" in *"$benchmark_filter"*) ;; *) continue ;; esac
    name=$(basename "$path")${GROVE_BENCHMARK_SUFFIX:-}
    echo
    echo "== benchmark $path"
    (cd "$tree/grove" && timeout "$timeout_s" "./$path" --json "$logs/$name.json") 2>&1 |
      tee "$logs/$name.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || echo "benchmark $path failed"
  done <"$here/benchmarks.txt"
  # GROVE_PYTHON_BENCHMARKS=0 leaves the PyTorch benchmarks to a call of their own
  # (together they outlast one device call with the C++ benchmarks).
  if [ "${GROVE_PYTHON_BENCHMARKS:-1}" != 0 ]; then
    if [ -f "$tree/grove/benchmarks/torch_backend.py" ]; then
      case "benchmarks/torch_backend.py" in
        *"$benchmark_filter"*)
          echo
          echo "== benchmark benchmarks/torch_backend.py"
          (cd "$tree/grove" && PYTHONPATH="$python_path" timeout "$timeout_s" \
            "$python_bin" benchmarks/torch_backend.py --json "$logs/torch_backend${GROVE_BENCHMARK_SUFFIX:-}.json") 2>&1 |
            tee "$logs/torch_backend${GROVE_BENCHMARK_SUFFIX:-}.txt"
          [ "${PIPESTATUS[0]}" -eq 0 ] || echo "benchmark benchmarks/torch_backend.py failed" ;;
      esac
    fi
    if [ -f "$tree/grove/benchmarks/torch_zoo.py" ]; then
      case "benchmarks/torch_zoo.py" in
        *"$benchmark_filter"*)
          echo
          echo "== benchmark benchmarks/torch_zoo.py"
          (cd "$tree/grove" && PYTHONPATH="$tree/grove/python" timeout "$timeout_s" \
            python3 benchmarks/torch_zoo.py --json "$logs/torch_zoo${GROVE_BENCHMARK_SUFFIX:-}.json") 2>&1 |
            tee "$logs/torch_zoo${GROVE_BENCHMARK_SUFFIX:-}.txt"
          [ "${PIPESTATUS[0]}" -eq 0 ] || echo "benchmark benchmarks/torch_zoo.py failed"
          # The decode rows, added to the zoo's JSON (a budget of their own).
          (cd "$tree/grove" && PYTHONPATH="$tree/grove/python" timeout "$timeout_s" \
            python3 benchmarks/torch_zoo.py --decode --no-zoo --merge \
            --json "$logs/torch_zoo${GROVE_BENCHMARK_SUFFIX:-}.json") 2>&1 |
            tee -a "$logs/torch_zoo${GROVE_BENCHMARK_SUFFIX:-}.txt"
          [ "${PIPESTATUS[0]}" -eq 0 ] || echo "benchmark benchmarks/torch_zoo.py --decode failed" ;;
      esac
    fi
  fi
fi

echo
echo "test cases: $cases_passed passed, $cases_failed failed, $cases_skipped skipped"
[ ${#failed_names[@]} -gt 0 ] && echo "failed binaries: ${failed_names[*]}"
echo "$binaries_passed passed, $binaries_failed failed"
echo "logs: $logs"
[ "$binaries_failed" -eq 0 ]
