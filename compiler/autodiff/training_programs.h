// build_training_programs splits training into two programs:
//
//   forward   the model itself (same inputs, in the same order) whose outputs
//             are the model's outputs, then the loss (unless it already is an
//             output), then the saved activations the backward reads.
//   backward  inputs: d(loss) (a scalar, normally 1), the saved activations,
//             the model inputs / params / buffers it reads (by name, so a
//             caller passes the same persistent tensors it gave the forward),
//             and one gradient buffer per param ("grad.<param>", zeros);
//             outputs: one gradient per param, in `params` order.
//
// With GradientStorage::kPersistentBuffers (the default) the backward writes
// each gradient into its buffer in place (copy_into) and returns the aliasing
// result, so gradients live at stable addresses that an optimizer program
// (training/optimizer.h) and a captured graph can bind once.
//
//   TrainingPrograms programs = build_training_programs(model, loss);
//   outputs = run(programs.forward, model_inputs);
//   grads   = run(programs.backward, programs.backward_arguments(...));
//
// Note [Saved activations]: the backward reads some forward values (a
// linear's input, a softmax's output, a layer_norm's input). Each one is
// either SAVED (a forward output, held until the backward runs) or
// RECOMPUTED in the backward from other values. Program inputs (model inputs,
// params, buffers) are passed to the backward directly and cost nothing. For a
// node result, visited from the last forward node to the first:
//   - results of views (reshape, transpose, permute, slice) are recomputed when
//     the values they newly require take no more bytes than they do (a view
//     launches no kernel, so it only has to not cost memory);
//   - results of elementwise ops (including `full`) are recomputed when the
//     values they newly require take strictly fewer bytes than they do (one
//     fused kernel runs again, so it has to save memory), e.g. gelu(h) when h
//     is saved anyway for gelu's own gradient;
//   - everything else (matmuls, reductions, gathers, dropout, ops with
//     effects) is saved, and so is a node that reads the implicit generator's
//     state buffers (a dropout's offset: Note [Generator state is read once]
//     in training_programs.cc), so the backward's masks are the forward's and
//     the backward draws nothing. Test: DropoutTraining.* (tests/compiler/
//     training/dropout_training_test.cc).
// "Newly require" counts the operands that are neither program inputs nor
// results of operand-less nodes nor already needed by the backward. Gradient
// rules compute what they can from these (layer_norm recomputes its mean and
// rstd from the saved input), so the saved set is the model values, never
// rule intermediates. TrainingOptions::recompute = false saves everything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::autodiff {

enum class GradientStorage : uint8_t {
  kPersistentBuffers,  // backward writes "grad.<param>" buffers in place
  kOutputs,            // backward returns fresh gradient values
};

struct TrainingOptions {
  // Params to differentiate, as model value ids; empty: every floating param.
  std::vector<ir::ValueId> params;
  GradientStorage gradient_storage = GradientStorage::kPersistentBuffers;
  // Apply Note [Saved activations]; false saves every forward value the backward reads.
  bool recompute = true;
};

// Where the backward's input at some position comes from.
struct BackwardInput {
  enum class Source : uint8_t {
    kLossGradient,    // d(loss): a scalar of the loss's dtype, normally 1
    kForwardOutput,   // forward.outputs()[index]: a saved activation
    kForwardInput,    // forward.inputs()[index]: a model input, param or buffer
    kGradientBuffer,  // the gradient buffer of params[index]
  };
  Source source = Source::kLossGradient;
  size_t index = 0;
};

struct TrainingPrograms {
  ir::Program forward;
  ir::Program backward;
  // forward.outputs(): [0, model_output_count) the model's outputs, then the
  // loss unless it is one of them, then the saved activations.
  size_t model_output_count = 0;
  size_t loss_output = 0;
  size_t first_saved_output = 0;
  // One per backward.inputs() position.
  std::vector<BackwardInput> backward_inputs;
  // The differentiated params (forward value ids), in backward output order.
  std::vector<ir::ValueId> params;
  // Per param: false when the loss does not depend on it (its gradient is zero).
  std::vector<bool> param_has_gradient;
  GradientStorage gradient_storage = GradientStorage::kPersistentBuffers;
  // Names of the forward values the backward recomputes, and the bytes saved.
  std::vector<std::string> recomputed;
  int64_t saved_bytes = 0;

  size_t saved_count() const { return forward.outputs().size() - first_saved_output; }
};

// The name of the gradient buffer of a param: "grad.<param name>".
std::string gradient_buffer_name(const std::string& param_name);

// Builds the forward and backward programs of `model` for the floating scalar
// `loss` (a value of `model`). Throws grove::Error naming the node when a
// gradient must flow through an op with no gradient rule.
TrainingPrograms build_training_programs(const ir::Program& model, ir::ValueId loss,
                                         const TrainingOptions& options = {});

}  // namespace grove::compiler::autodiff
