#include "compiler/backends/stage.h"

namespace grove::compiler::backends {

ops::ExecMode exec_mode(Stage stage) {
  return stage == Stage::kInference ? ops::ExecMode::kInference : ops::ExecMode::kTraining;
}

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kInference:
      return "inference";
    case Stage::kForward:
      return "forward";
    case Stage::kBackward:
      return "backward";
    case Stage::kOptimizer:
      return "optimizer";
  }
  return "?";
}

}  // namespace grove::compiler::backends
