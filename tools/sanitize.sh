#!/usr/bin/env bash
# Runs grove's sim tests under the sanitizers (issue 9):
#   --config=asan  AddressSanitizer + UndefinedBehaviorSanitizer over the sim
#                  suite (every cc_test; cuda instances skip without a GPU)
#   --config=tsan  ThreadSanitizer over the tree, threads and backend tests
# Each config builds in its own output base so that it neither rebuilds nor
# thrashes the normal build. On 2 cores the asan build of the whole suite
# takes long; name a subset to run only that:
#
#   tools/sanitize.sh                      # both, whole asan suite + tsan subset
#   tools/sanitize.sh asan //tests/reliability/... //tests/fuzz/...
#   tools/sanitize.sh asan //tests/capi/...   # the C API (libgrove.so's code) alone
#   tools/sanitize.sh tsan
#   tools/sanitize.sh model-fuzz [SECONDS]   # the model-file fuzzer under asan
#                                            # for SECONDS (default 600)
#
# GROVE_SANITIZE_OUTPUT_BASE (default /tmp/bazel_grove_sanitize) is the stem
# of the output bases (<stem>_asan, <stem>_tsan). Exits non-zero when any
# test fails or a sanitizer reports.
set -uo pipefail
cd "$(dirname "$0")/.."

stem=${GROVE_SANITIZE_OUTPUT_BASE:-/tmp/bazel_grove_sanitize}
which=${1:-both}
shift || true

tsan_targets=(
  //tests/cudagraph_trees/...
  //tests/reliability:threads_test
  //tests/reliability:fault_injection_test
  //tests/capi:capi_threads_test
)

run() {
  local config=$1
  shift
  echo "sanitize: --config=$config over $*"
  # halt_on_error: the first report fails the test; detect_leaks stays on for asan.
  bazel --output_base="${stem}_${config}" test --config="$config" --symlink_prefix=/ \
    --test_env=ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1 \
    --test_env=UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    --test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    --test_timeout=900 --local_test_jobs=1 "$@"
}

status=0
case "$which" in
  asan)
    run asan "${@:-//...}" || status=1 ;;
  tsan)
    run tsan "${@:-${tsan_targets[@]}}" || status=1 ;;
  model-fuzz)
    # Mutated model files (tests/fuzz/model_fuzzer.h) under ASan + UBSan: every
    # mutant must end in success or grove::Error, with no sanitizer report.
    seconds=${1:-600}
    run asan //tests/fuzz:model_fuzz_test --test_env=GROVE_MODEL_FUZZ_SECONDS="$seconds" \
      --test_output=errors || status=1 ;;
  both)
    run asan //... || status=1
    run tsan "${tsan_targets[@]}" || status=1 ;;
  *)
    echo "usage: tools/sanitize.sh [asan|tsan|both] [bazel targets...] | model-fuzz [SECONDS]" >&2
    exit 2 ;;
esac
exit $status
