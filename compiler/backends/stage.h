// Stage: which part of a step a compiled program is. A whole model called for
// inference is one program; a training step is three that run in order and
// share their params (training/trainer.h). The stage decides how the
// program is lowered (ops::ExecMode) and how a graph backend records it
// (cudagraph_trees' CompilationMode).
#pragma once

#include <cstdint>

#include "compiler/ops/op_registry.h"

namespace grove::compiler::backends {

enum class Stage : uint8_t {
  kInference,  // a whole model, called on its own
  kForward,    // a training step's forward: starts the step
  kBackward,   // its backward: reads the forward's saved activations
  kOptimizer,  // its optimizer step: updates params and state in place
};

// kInference for an inference call, kTraining for the three training stages.
ops::ExecMode exec_mode(Stage stage);
// "inference", "forward", "backward", "optimizer".
const char* stage_name(Stage stage);

}  // namespace grove::compiler::backends
