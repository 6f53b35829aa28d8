#!/usr/bin/env bash
# tools/check_layers.sh --includes on small trees: every layer rule catches
# its violation (and names the file and line), and a tree that keeps the rules
# passes, including the includes each layer is allowed.
set -euo pipefail
check=tools/check_layers.sh
[ -x "$check" ] || { echo "missing $check in runfiles" >&2; exit 1; }
check=$(pwd)/$check
root=${TEST_TMPDIR:-$(mktemp -d)}

# write PATH LINE...: a source file holding the given lines.
write() {
  local path=$1; shift
  mkdir -p "$(dirname "$path")"
  printf '%s\n' "$@" >"$path"
}

expect_pass() {
  local output
  if ! output=$("$check" --includes "$1"); then
    echo "FAIL: $1 should pass:"$'\n'"$output" >&2; exit 1
  fi
  grep -q "^check includes: passed$" <<<"$output"
}

# expect_violation DIR FILE:LINE: the tree fails and the report names FILE:LINE.
expect_violation() {
  local output
  if output=$("$check" --includes "$1"); then
    echo "FAIL: $1 should fail on $2:"$'\n'"$output" >&2; exit 1
  fi
  grep -q "^check includes: failed$" <<<"$output"
  grep -q "^  $2:" <<<"$output" || { echo "FAIL: $2 not reported:"$'\n'"$output" >&2; exit 1; }
}

# Allowed: the platforms include the CUDA headers and the runtime core; codegen
# includes LLVM and CUDA; tests include anything but LLVM and CUDA headers;
# benchmarks include the product.
good=$root/good
write "$good/runtime/cuda/cuda_platform.cc" '#include <cuda.h>' '#include "runtime/platform.h"'
write "$good/runtime/device_context.cc" '#include "runtime/sim/sim_platform.h"'
write "$good/compiler/codegen/llvm_targets.cc" '#include <llvm/IR/Module.h>' '#include <cuda.h>'
write "$good/cli/run_command.cc" '#include "compiler/backends/compile.h"'
write "$good/benchmarks/serve/serve.cc" '#include "cli/common/flags.h"' '#include "serving/server.h"'
write "$good/tests/runtime/cuda_test.cc" '#include "runtime/cuda/cuda_platform.h"' '#include "benchmarks/common/table.h"'
write "$good/cudagraph_trees/function_registry.h" '#include "compiler/lowered_function.h"'
write "$good/cudagraph_trees/backend/segment_plan.h" '#include "compiler/lowered_program.h"' \
  '#include "compiler/backends/backend_registry.h"' '#include "cudagraph_trees/config.h"'
write "$good/training/trainer.cc" '#include "compiler/autodiff/training_programs.h"' \
  '#include "compiler/backends/compile.h"'
write "$good/serving/llm/sampler.cc" '#include "compiler/ops/philox.h"' '#include "weights/safetensors.h"'
write "$good/benchmarks/eager_latency/eager_latency.cc" '#include "compiler/codegen/kernel_compiler.h"'
write "$good/tests/compiler/lowering/lowering_test.cc" '#include "compiler/lowering/lower.h"'
expect_pass "$good"

n=0
violation() {  # violation FILE LINE: a good tree plus FILE holding LINE on line 2
  n=$((n + 1))
  local tree=$root/bad$n
  cp -r "$good" "$tree"
  write "$tree/$1" '// a file that breaks one rule' "$2"
  expect_violation "$tree" "$1:2"
}
violation compiler/lowering/steps.h '#include "runtime/cuda/blas.h"'
violation cudagraph_trees/tree_manager.cc '#include "runtime/sim/sim_graph.h"'
violation benchmarks/launch_overhead/launch_overhead.cc '  #  include "runtime/cuda/cuda_platform.h"'
violation cli/report.cc '#include "benchmarks/common/table.h"'
violation serving/server.cc '#include "tests/common/test_util.h"'
violation runtime/tensor.cc '#include "tests/runtime/test_kernels.h"'
violation benchmarks/bucket_pool/bucket_pool.cc '#include "tests/runtime/test_kernels.h"'
violation runtime/blas.cc '#include <cublasLt.h>'
violation serving/device_worker.cc '#include <cuda_runtime.h>'
violation tests/runtime/graph_test.cc '#include <cuda.h>'
violation compiler/lowering/executor.cc '#include <llvm/Support/Error.h>'
violation runtime/cuda/ptx.cc '#include <llvm-c/Core.h>'
violation runtime/tensor.h '#include "compiler/lowered_function.h"'
violation runtime/device.cc '#include "serving/server.h"'
violation compiler/backends/compile.cc '#include "training/trainer.h"'
violation compiler/lowering/lower.cc '#include "cudagraph_trees/tree_manager.h"'
violation training/trainer.cc '#include "cudagraph_trees/backend/thread_trees.h"'
violation weights/model_weights.cc '#include "serving/server.h"'
violation cudagraph_trees/tree_manager.cc '#include "compiler/backends/compile.h"'
violation cudagraph_trees/backend/segment_plan.h '#include "compiler/lowering/lower.h"'
violation serving/server.cc '#include "compiler/codegen/kernel_compiler.h"'
violation cli/measure.h '#include "compiler/lowering/lower.h"'
violation serving/llm/decoder.cc '#include "compiler/autodiff/joint_graph.h"'
violation capi/grove.cc '#include "compiler/ops/op_registry.h"'
violation training/trainer.cc '#include "runtime/sim/sim_platform.h"'
violation distributed/gradient_all_reduce.cc '#include "tests/common/test_util.h"'
echo "check_layers_test: the good tree passes and all $n violations are reported"
