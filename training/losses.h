// Appending a training loss to a model program: the loss ops take a new
// program input (targets or labels) and produce the floating scalar that
// build_training_programs differentiates. The loss is not added to the
// program's outputs (the forward training program returns it anyway).
//
//   ir::Program model = load_model_file("benchmarks/models/mlp16x512.json", {{"batch", 8}});
//   ir::ValueId loss = add_mse_loss(model, model.outputs()[0]);  // new input "target"
//   TrainingPrograms programs = autodiff::build_training_programs(model, loss);
#pragma once

#include <string>

#include "compiler/ir/program.h"

namespace grove::training {

// mean((prediction - target)^2) with `target` a new `input` of prediction's type.
compiler::ir::ValueId add_mse_loss(compiler::ir::Program& program, compiler::ir::ValueId prediction,
                                   const std::string& target_name = "target",
                                   const std::string& loss_name = "loss");

// cross_entropy(logits [..., C], labels [...]) with `labels` a new i64 `input`.
compiler::ir::ValueId add_cross_entropy_loss(compiler::ir::Program& program,
                                             compiler::ir::ValueId logits,
                                             const std::string& labels_name = "labels",
                                             const std::string& loss_name = "loss");

// Next-token prediction: cross_entropy of logits [B, T, V] at positions
// 0..T-2 against the integer tokens [B, T] at positions 1..T-1 (both sliced
// views; no new input). Needs T >= 2.
compiler::ir::ValueId add_next_token_loss(compiler::ir::Program& program,
                                          compiler::ir::ValueId logits,
                                          compiler::ir::ValueId tokens,
                                          const std::string& loss_name = "loss");

}  // namespace grove::training
