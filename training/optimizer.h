// Optimizer step programs: one program that updates every param in place
// from its gradient buffer, with the optimizer's state in persistent buffers.
//
//   OptimizerProgram sgd = build_optimizer_program(model, params, OptimizerKind::kSgdMomentum);
//   inputs: lr, momentum, weight_decay               (f32 scalar `input`s)
//           then per param: <param> (param), grad.<param> (buffer), <param>.momentum (buffer)
//   AdamW:  lr, beta1, beta2, eps, weight_decay, step (f32 scalar `input`s; step is 1-based)
//           then per param: <param>, grad.<param>, <param>.exp_avg, <param>.exp_avg_sq
// With GradientSource::kInput each grad.<param> is an `input` instead of a
// buffer (python/grove/optim.py passes PyTorch's .grad tensors each step,
// through grove_optimizer_program in capi/grove.h); with kFlatInput one flat
// input "grads" holds every param's gradient in order (one buffer a process
// group's collective reduces whole) and grad.<param> is its slice, reshaped.
//
// The hyper-parameters are program inputs, so a learning-rate schedule (or
// the step count of AdamW's bias correction) changes no kernel and no graph.
// The program has no outputs: its effect is the in-place update, and its
// mutated inputs (mutated_input_positions) are exactly the params and the
// state buffers; gradient buffers and hyper-parameters are only read. The
// update formulas are the ops' (compiler/ops/training_ops.cc): PyTorch's SGD
// with momentum (dampening 0, not Nesterov) and AdamW.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::training {

enum class OptimizerKind : uint8_t { kSgdMomentum, kAdamW };

const char* optimizer_kind_name(OptimizerKind kind);  // "sgd_momentum", "adamw"
// The kind named `name` (optimizer_kind_name's); throws grove::Error otherwise.
OptimizerKind parse_optimizer_kind(const std::string& name);

// Where the step reads each gradient: a buffer the backward program wrote
// (the Trainer), an input of every call (a caller that owns its gradients),
// or a slice of one flat input "grads" (every param's, in order; all params
// of one dtype).
enum class GradientSource : uint8_t { kBuffer, kInput, kFlatInput };

// Every hyper-parameter either optimizer reads; each reads its own subset.
struct Hyperparameters {
  double lr = 1e-3;
  double momentum = 0.9;  // SGD
  double beta1 = 0.9;     // AdamW
  double beta2 = 0.999;   // AdamW
  double eps = 1e-8;      // AdamW
  double weight_decay = 0;
};

struct OptimizerProgram {
  OptimizerKind kind = OptimizerKind::kSgdMomentum;
  compiler::ir::Program program;
  // Names of the leading scalar inputs, in call order.
  std::vector<std::string> hyperparameter_names;
  // Per trained param (program value ids): the param, its gradient (buffer or
  // input, GradientSource) and its state buffers (SGD: momentum; AdamW: exp_avg, exp_avg_sq).
  std::vector<compiler::ir::ValueId> params;
  std::vector<compiler::ir::ValueId> gradients;
  std::vector<std::vector<compiler::ir::ValueId>> state;

  // The values of the hyper-parameter inputs, in call order, for the
  // 1-based `step` (used by AdamW's bias correction).
  std::vector<double> hyperparameter_values(const Hyperparameters& hyperparameters,
                                            int64_t step) const;
};

// Builds the optimizer step for `params` (param value ids of `model`, whose
// names, shapes, dtypes and initializers the program copies). Throws
// grove::Error when a value is not a floating param or `params` is empty.
OptimizerProgram build_optimizer_program(const compiler::ir::Program& model,
                                         const std::vector<compiler::ir::ValueId>& params,
                                         OptimizerKind kind,
                                         GradientSource gradients = GradientSource::kBuffer);

// Positions in program.inputs() of the inputs `program` writes in place,
// following results that alias their operands (Note [Mutation in SSA]);
// ascending.
std::vector<size_t> mutated_input_positions(const compiler::ir::Program& program);

}  // namespace grove::training
