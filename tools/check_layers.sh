#!/usr/bin/env bash
# The layer rules of docs/ARCHITECTURE.md (section 1) that a build does not
# check by itself, and the format of the C++ sources:
#
#   includes    no header crosses a layer: platform headers (runtime/cuda,
#               runtime/sim) only inside runtime/ and the tests; nothing under
#               benchmarks/ or tests/ from the product (runtime, compiler,
#               cudagraph_trees, training, distributed, weights, serving, cli,
#               capi); nothing under tests/ from
#               benchmarks/; nothing above the runtime from it, above the
#               compiler from it, or above training from it; the tree manager
#               sees compiler/lowered_function.h only; compiler/lowering and
#               compiler/codegen (the benchmarks may time codegen) only inside
#               the compiler; autodiff, ops and reference only from the
#               compiler, training and data parallel; CUDA headers only in
#               runtime/cuda and compiler/codegen; LLVM headers only in
#               compiler/codegen.
#   visibility  Bazel refuses a dependency its visibility forbids: every
#               target of every */visibility_probe package (one forbidden edge
#               each) must fail analysis with a visibility error, and each
#               package's `control` must pass.
#   docs        no comment cites a design document outside the repository;
#               every cited Note [...] is defined; docs/ARCHITECTURE.md's index
#               of Notes names no Note that is gone or moved (tools/notes_index.py
#               --write renews it; a Note it lacks is only a warning); the README's
#               Configuration names every GROVE_* variable the product reads and
#               none it no longer reads (tools/env_switches.py --check).
#   format      clang-format --dry-run --Werror over the C++ sources.
#
#   tools/check_layers.sh                 every check on this checkout
#   tools/check_layers.sh --includes DIR  the include rules on the tree at DIR
#
# Prints "check <name>: passed" or "check <name>: failed" per check (the
# totals of tools/test.sh count them) and exits 1 when any failed.
set -uo pipefail

# C++ sources under the current directory, as paths relative to it.
cpp_sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
     [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
    git ls-files --cached --others --exclude-standard -- '*.h' '*.cc' '*.cu' |
      while read -r file; do [ -f "$file" ] && echo "$file"; done
  else
    find . -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sed 's|^\./||'
  fi
}

# Prints "file:line: include" for each include of `pattern` in `files` (stdin).
includes_matching() {
  local pattern=$1
  xargs -r grep -n -H -E "^[[:space:]]*#[[:space:]]*include[[:space:]]*${pattern}" || true
}

# Reads the list of sources on stdin; prints one line per broken rule.
include_violations() {
  local sources
  sources=$(cat)
  local product='^(runtime|compiler|cudagraph_trees|training|distributed|weights|serving|cli|capi)/'
  local above_runtime='^(compiler|cudagraph_trees|training|distributed|weights|serving|cli|capi|benchmarks)/'
  grep -E "$above_runtime" <<<"$sources" | includes_matching '"runtime/(cuda|sim)/' |
    sed 's/$/  (a platform header above the runtime: use runtime::Platform)/'
  grep -E "$product" <<<"$sources" | includes_matching '"(benchmarks|tests)/' |
    sed 's/$/  (the product includes the harness or the tests)/'
  grep -E '^benchmarks/' <<<"$sources" | includes_matching '"tests/' |
    sed 's/$/  (a benchmark includes test code)/'
  local upper='"(training|distributed|weights|cudagraph_trees|serving|cli|capi)/'
  grep -E '^runtime/' <<<"$sources" | includes_matching "(\"compiler/|$upper)" |
    sed 's/$/  (the runtime includes a layer above it)/'
  grep -E '^compiler/' <<<"$sources" | includes_matching "$upper" |
    sed 's/$/  (the compiler includes a layer above it)/'
  grep -E '^(training|distributed|weights)/' <<<"$sources" |
    includes_matching '"(cudagraph_trees|serving|cli|capi)/' |
    sed 's/$/  (training, data parallel or weights include a layer above them)/'
  grep -E '^cudagraph_trees/' <<<"$sources" | grep -v -E '^cudagraph_trees/backend/' |
    includes_matching '"compiler/' | grep -v '"compiler/lowered_function\.h"' |
    sed 's/$/  (the tree manager sees the lowered-function interface only)/'
  grep -v -E '^(compiler|tests)/' <<<"$sources" | includes_matching '"compiler/lowering/' |
    sed 's/$/  (the compiler'"'"'s internals: use compiler\/lowered_program.h or the door)/'
  grep -v -E '^(compiler|tests|benchmarks)/' <<<"$sources" | includes_matching '"compiler/codegen/' |
    sed 's/$/  (the code generator is the compiler'"'"'s internals)/'
  grep -v -E '^(compiler|training|distributed|tests)/' <<<"$sources" |
    includes_matching '"compiler/(autodiff|reference|ops)/' | grep -v '"compiler/ops/philox\.h"' |
    sed 's/$/  (autodiff, the op registry and the reference are for building programs)/'
  local cuda='[<"](cuda|cuda_runtime|cuda_runtime_api|cublas|cublas_v2|cublasLt|cudaTypedefs|nccl|nvrtc|cuda_bf16|cuda_fp16|driver_types|vector_types|library_types)\.h[>"]'
  grep -v -E '^(runtime/cuda|compiler/codegen)/' <<<"$sources" | includes_matching "$cuda" |
    sed 's/$/  (a CUDA header outside runtime\/cuda and compiler\/codegen)/'
  grep -v -E '^compiler/codegen/' <<<"$sources" | includes_matching '[<"](llvm|llvm-c)/' |
    sed 's/$/  (an LLVM header outside compiler\/codegen)/'
}

report() {  # report NAME STATUS [DETAILS]
  if [ "$2" -eq 0 ]; then
    echo "check $1: passed"
  else
    [ -n "${3:-}" ] && echo "$3" | sed 's/^/  /'
    echo "check $1: failed"
  fi
  return "$2"
}

check_includes() {
  local violations
  violations=$(cpp_sources | include_violations)
  [ -z "$violations" ]
  report includes $? "$violations"
}

# Every package named visibility_probe holds probes: each target must fail
# analysis with a visibility error (one forbidden edge each), except its
# `control`, which must pass (so a probe fails for its dependency, not its
# setup). They are tagged manual, so `bazel build //...` never sees them.
visibility_probes() {  # prints "label" per target of every probe package
  local build package
  find . -path ./bazel-\* -prune -o -path '*/visibility_probe/BUILD.bazel' -print | sort |
    while read -r build; do
      package=${build#./}
      package=${package%/BUILD.bazel}
      sed -n -E 's/^[[:space:]]*name = "([^"]+)",.*/\1/p' "$build" | sed "s|^|//$package:|"
    done
}

check_visibility() {
  local status=0 details="" probe output probes=0
  for probe in $(visibility_probes); do
    output=$(bazel build --nobuild "$probe" 2>&1)
    local built=$?
    if [ "${probe##*:}" = control ]; then
      [ $built -eq 0 ] && continue
      status=1 details+="$probe (a control) does not analyze:"$'\n'
      details+=$(grep ERROR <<<"$output" | head -5)$'\n'
      continue
    fi
    probes=$((probes + 1))
    if [ $built -eq 0 ]; then
      status=1 details+="$probe built; its dependency must not be visible"$'\n'
    elif ! grep -q "is not visible from target" <<<"$output"; then
      status=1 details+="$probe failed without a visibility error:"$'\n'
      details+=$(grep -E "ERROR" <<<"$output" | head -5)$'\n'
    fi
  done
  [ "$probes" -gt 0 ] || { status=1 details+="no visibility probes found"$'\n'; }
  [ "$status" -eq 0 ] && echo "  $probes forbidden edges refused by Bazel"
  report visibility "$status" "$details"
}

# docs/ARCHITECTURE.md is the design: no comment cites a document outside the
# repository, every cited Note exists, and the doc's index of Notes is not stale;
# the README documents every environment variable the product reads.
check_docs() {
  local details status=0
  details=$(git grep -n -E 'DESIGN(\.md| §)' -- ':!tools/check_layers.sh' 2>/dev/null)
  [ -n "$details" ] && status=1 details="cites a document outside the repository:"$'\n'"$details"$'\n'
  local notes
  notes=$(python3 tools/notes_index.py --check) || { status=1 details+="$notes"; }
  local switches
  switches=$(python3 tools/env_switches.py --check) || { status=1 details+="$switches"; }
  report docs "$status" "$details"
}

check_format() {
  local output
  output=$(cpp_sources | grep -v -E '\.cu$' | xargs -r clang-format --dry-run --Werror 2>&1)
  local status=$?
  report format "$status" "$(grep -E ': error: ' <<<"$output" | sed -E 's/:[0-9]+:[0-9]+: error: .*//' | sort -u)"
}

if [ "${1:-}" = "--includes" ]; then
  cd "${2:?--includes needs a directory}" || exit 2
  check_includes
  exit $?
fi

cd "$(dirname "$0")/.." || exit 2
failed=0
check_includes || failed=1
check_visibility || failed=1
check_docs || failed=1
check_format || failed=1
exit "$failed"
