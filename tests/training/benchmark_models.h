// The two benchmark models with a training loss attached, and seeded
// synthetic data for them, shared by the training tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "compiler/ir/program.h"
#include "compiler/model_format/model_json.h"
#include "compiler/reference/reference_interpreter.h"
#include "training/losses.h"

namespace grove::training::testing {

struct ModelWithLoss {
  compiler::ir::Program program;
  compiler::ir::ValueId loss = compiler::ir::kNoValue;
};

// mlp16x512 at `batch`, with mse_loss against a new input "target" [batch, 512].
inline ModelWithLoss mlp_with_mse(int64_t batch,
                                  compiler::ir::Device device = runtime::kCpuDevice) {
  ModelWithLoss model;
  model.program = compiler::model_format::load_model_file("benchmarks/models/mlp16x512.json",
                                                          {{"batch", batch}}, device);
  model.loss = add_mse_loss(model.program, model.program.outputs()[0]);
  return model;
}

// gpt4x256 at (batch, seq), with next-token cross_entropy of its logits
// against its own tokens shifted by one.
inline ModelWithLoss gpt_with_next_token_loss(int64_t batch, int64_t seq,
                                              compiler::ir::Device device = runtime::kCpuDevice) {
  ModelWithLoss model;
  model.program = compiler::model_format::load_model_file("benchmarks/models/gpt4x256.json",
                                                          {{"batch", batch}, {"seq", seq}}, device);
  compiler::ir::ValueId tokens = model.program.inputs_of_kind(compiler::ir::ValueKind::kInput)[0];
  model.loss = add_next_token_loss(model.program, model.program.outputs()[0], tokens);
  return model;
}

inline compiler::reference::HostTensor normal_tensor(const compiler::ir::Shape& shape, double std,
                                                     std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, std);
  compiler::reference::HostTensor tensor{shape, compiler::ir::DType::kF32, {}};
  tensor.data.resize(static_cast<size_t>(runtime::shape_numel(shape)));
  for (double& value : tensor.data) value = normal(rng);
  return tensor;
}

// Tokens [batch, seq] repeating `pattern` (each row starting at its own phase).
inline compiler::reference::HostTensor repeating_tokens(int64_t batch, int64_t seq,
                                                        const std::vector<int64_t>& pattern) {
  compiler::reference::HostTensor tokens{{batch, seq}, compiler::ir::DType::kI64, {}};
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t t = 0; t < seq; ++t) {
      tokens.data.push_back(
          static_cast<double>(pattern[static_cast<size_t>((row + t) % int64_t(pattern.size()))]));
    }
  }
  return tokens;
}

}  // namespace grove::training::testing
