// Running a compiled model (or a training step) repeatedly on the calling
// thread's stream and measuring it, the way `grove run` and `grove demo`
// report it: per-call latency (call until its results are ready), the work
// one call launches, and, under "cudagraphs", what the tree did meanwhile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/common/latency.h"
#include "cli/model_setup.h"
#include "cli/tree_stats.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_program.h"
#include "weights/safetensors.h"

namespace grove::cli {

struct MeasureOptions {
  std::string backend = "eager";
  int64_t warmup = 3;           // untimed calls first (a graph backend warms up, records, replays)
  int64_t iters = 20;           // timed calls
  uint64_t seed = 0;            // of the random inputs
  double learning_rate = 1e-2;  // training: SGD with momentum 0.9
  // Inference: weights copied into the model once it is compiled (--weights);
  // nullptr keeps the model's initializers.
  const weights::SafetensorsFile* weights = nullptr;
  // Inference: a safetensors file of the model's inputs (--inputs) instead of
  // random ones.
  std::string inputs_path;
};

struct Measurement {
  std::string backend;
  LatencySummary latency;       // per call (inference) or per step (training)
  size_t kernels_per_call = 0;  // generated kernels one call launches when run eagerly
  size_t gemms_per_call = 0;    // library GEMMs one call launches when run eagerly
  double compile_s = 0;         // compile (lowering, code generation, state init)
  double warmup_s = 0;          // the untimed calls
  uint64_t weight_bytes = 0;    // copied from options.weights
  // Under the graph backend: the tree's counters over the timed calls, and
  // the tree (stats and DOT) after the last call.
  std::optional<TreeActivity> timed_activity;
  nlohmann::json tree;
  std::string tree_dot;
  // Inference: the outputs of the last call, as bytes. Training: the loss of
  // every step (warm-up steps included) and every state tensor after the last
  // step (params, gradients, optimizer state) in state-name order.
  std::vector<std::vector<uint8_t>> result_bytes;
  std::vector<double> losses;
  std::string outputs_text;  // "f32[1, 32, 512]"
  std::string loss_name;
};

// Compiles `program` with options.backend (require_backend() first) and measures it.
Measurement measure_inference(const compiler::ir::Program& program, const MeasureOptions& options);
// Builds a Trainer for `setup` with options.backend and measures its steps.
Measurement measure_training(const TrainingSetup& setup, const MeasureOptions& options);

}  // namespace grove::cli
