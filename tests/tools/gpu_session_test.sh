#!/usr/bin/env bash
# tools/gpu_session.sh with a stand-in bundle and a stand-in PyTorch script:
# the bundle's run_all.sh writes the fixtures' JSON (one benchmark crashes),
# the PyTorch stand-in hangs past its limit. The session must stop it (and the
# process it started), go on, and leave in $OUT exactly RESULTS.md,
# session.log and gpu_logs.tar.gz, with RESULTS.md saying what failed.
set -euo pipefail
root=$(pwd)
fixtures="$root/tests/tools/fixtures"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
bundle="$tmp/bundle"
mkdir -p "$bundle"
echo "c0ffee1" >"$bundle/commit.txt"
cat >"$bundle/run_all.sh" <<STANDIN
#!/usr/bin/env bash
echo "grove GPU run (stand-in): \$*"
if [ "\${1:-}" = "--filter" ]; then
  for name in launch_overhead backend_latency eager_latency train_step tree_overhead; do
    echo "== benchmark benchmarks/\$name/\$name"
    cp "$fixtures/\$name.json" "\$OUT/gpu_logs/\$name.json"
    echo "\$name table" >"\$OUT/gpu_logs/\$name.txt"
  done
  echo "== benchmark benchmarks/serve/serve"
  echo "serve: aborted" | tee "\$OUT/gpu_logs/serve.txt"
  echo "benchmark benchmarks/serve/serve failed"
else
  echo "test cases: 12 passed, 0 failed, 2 skipped"
  echo "3 passed, 0 failed"
fi
STANDIN
cat >"$tmp/hanging_torch.py" <<STANDIN
import subprocess, sys, time
child = subprocess.Popen(["sleep", "120"])
open("$tmp/pids", "w").write("%d %d\n" % (__import__("os").getpid(), child.pid))
print("compare_torch (stand-in): started", flush=True)
time.sleep(120)
STANDIN

out="$tmp/out"
status=0
OUT="$out" GROVE_BUNDLE_DIR="$bundle" GROVE_TORCH_SCRIPT="$tmp/hanging_torch.py" \
  GROVE_TORCH_LIMIT_S=5 bash tools/gpu_session.sh >"$tmp/console.txt" 2>&1 || status=$?
cat "$tmp/console.txt"
[ "$status" -eq 1 ] || { echo "expected exit status 1 (steps failed), got $status" >&2; exit 1; }

# The hanging script and its child were stopped.
read -r -a pids <"$tmp/pids"
for pid in "${pids[@]}"; do
  if kill -0 "$pid" 2>/dev/null; then echo "process $pid outlived its step" >&2; exit 1; fi
done
# Exactly the three files (matplotlib absent) or four (present); no loose logs.
files=$(cd "$out" && find . -type f | sort | tr '\n' ' ')
case "$files" in
  "./RESULTS.md ./gpu_logs.tar.gz ./session.log " | \
  "./RESULTS.md ./gpu_logs.tar.gz ./latency.png ./session.log ") ;;
  *) echo "unexpected files in OUT: $files" >&2; exit 1 ;;
esac
listing=$(tar -tzf "$out/gpu_logs.tar.gz")
for member in backend_latency.json backend_latency.txt session.tsv tests.log torch.log; do
  grep -qx "gpu_logs/$member" <<<"$listing" || { echo "gpu_logs.tar.gz lacks $member" >&2; exit 1; }
done
grep -q "compare_torch (stand-in): started" "$out/session.log"

md="$out/RESULTS.md"
expect() { grep -qF -- "$1" "$md" || { echo "RESULTS.md lacks: $1" >&2; exit 1; }; }
expect "- grove commit: c0ffee1"
expect "- Tests (\`run_all.sh\`): test cases: 12 passed, 0 failed, 2 skipped; 3 passed, 0 failed"
expect "| tests | ok | 0 |"
expect "| benchmarks | failed (exit 1) | 1 |"
expect "| torch | timed out after 5s |"
expect "Benchmarks that failed or did not build: \`benchmarks/serve/serve\`."
expect "No \`torch.json\` in this session (the torch step timed out after 5s): it started but wrote no JSON"
expect "No \`serve.json\` in this session: it started but wrote no JSON"
expect "| grove cudagraphs within 2 µs of the bare replay, mlp16x512 b=1 | 100.7 − 99.20 = 1.52 µs | met |"
expect "bash $bundle/run_all.sh --filter // --benchmarks"

# A session with no bundle and its time budget spent: the steps are recorded as
# such, and RESULTS.md is still written (and says so).
out="$tmp/out2"
status=0
OUT="$out" GROVE_BUNDLE_DIR="$tmp/no_bundle" GROVE_SESSION_BUDGET_S=10 \
  bash tools/gpu_session.sh >"$tmp/console2.txt" 2>&1 || status=$?
[ "$status" -eq 1 ] || { cat "$tmp/console2.txt"; echo "expected status 1, got $status" >&2; exit 1; }
grep -q "gpu_bundle.sh" "$tmp/console2.txt"
md="$out/RESULTS.md"
expect "| tests | failed (no bundle) |"
expect "| benchmarks | failed (no bundle) |"
expect "| torch | skipped (no time left) |"
expect "Not run in this session (the torch step skipped (no time left)): no \`torch.json\`."
expect "- Goals: 0 met, 0 not met,"
# A bundle of benchmarks only (GROVE_BUNDLE_ONLY=benchmarks: empty tests.txt
# and python_tests.txt): the tests step is "not in this bundle", not a failure.
half="$tmp/half_bundle"
mkdir -p "$half"
echo "c0ffee2" >"$half/commit.txt"
: >"$half/tests.txt"
: >"$half/python_tests.txt"
echo benchmarks/backend_latency/backend_latency >"$half/benchmarks.txt"
cat >"$half/run_all.sh" <<STANDIN
#!/usr/bin/env bash
if [ "\${1:-}" != "--filter" ]; then echo "run_all.sh ran the tests" >"$tmp/half_ran_tests"; fi
cp "$fixtures/backend_latency.json" "\$OUT/gpu_logs/backend_latency\${GROVE_BENCHMARK_SUFFIX:-}.json"
STANDIN
printf 'print("compare_torch (stand-in): done")\n' >"$tmp/quick_torch.py"
out="$tmp/out3"
OUT="$out" GROVE_BUNDLE_DIR="$half" GROVE_TORCH_SCRIPT="$tmp/quick_torch.py" \
  bash tools/gpu_session.sh >"$tmp/console3.txt" 2>&1 ||
  { cat "$tmp/console3.txt"; echo "a benchmarks-only session failed" >&2; exit 1; }
[ ! -e "$tmp/half_ran_tests" ] || { echo "the tests step ran without tests" >&2; exit 1; }
md="$out/RESULTS.md"
expect "| tests | not in this bundle | - |"
expect "| benchmarks | ok | 0 |"
if grep -q "Not every step succeeded" "$md"; then
  echo "a step the bundle does not carry was called a failure" >&2; exit 1
fi
echo "ok"
