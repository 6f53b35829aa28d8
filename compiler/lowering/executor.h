// run_steps executes scheduled steps (steps.h) over an environment of slot
// tensors: allocates outputs with runtime::Tensor::empty (so a tree manager's
// pool routing applies), launches generated kernels and GEMMs on the device's
// current stream, and builds views. Only host steps (nonzero, print)
// synchronize or read device memory.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/lowering/scheduler.h"
#include "runtime/tensor.h"

namespace grove::compiler::lowering {

struct ExecutorOptions {
  // Receives the text of every `print` step; stderr when empty.
  std::function<void(const std::string&)> print_sink;
};

// Runs steps [first, end) of `program`. `env` has one entry per slot; the
// steps read and write it.
void run_steps(const ScheduledProgram& program, size_t first, size_t end,
               std::vector<runtime::Tensor>& env, const ExecutorOptions& options);

}  // namespace grove::compiler::lowering
