// Finite differences in f64 as the oracle for a Trainer's gradients: the
// trainer's forward program run on the float64 reference interpreter
// (compiler/reference) with the trainer's current state, so the oracle is
// the forward's op semantics alone: no gradient rule, no backward lowering,
// no kernel. A dropout drawing from the implicit generator reads the
// generator state the trainer's last forward was given (its seed and offset
// buffers), i.e. the forward's mask.
//
//   GradientOracle oracle(trainer, inputs);   // after trainer.forward_backward(inputs)
//   double numeric = oracle.derivative(param_index, element);
#pragma once

#include <cstddef>
#include <vector>

#include "compiler/reference/reference_interpreter.h"
#include "training/trainer.h"

namespace grove::testing {

class GradientOracle {
 public:
  // Snapshots the forward's inputs: `inputs` and the trainer's params and
  // buffers as they are now.
  GradientOracle(const training::Trainer& trainer, const compiler::TensorList& inputs);

  // The loss at the snapshot, in f64.
  double loss() const;
  // d loss / d params[param][element] by a central difference with step
  // h = 1e-5 * max(1, |value|) (f64: truncation and rounding ~1e-10).
  double derivative(size_t param, size_t element) const;
  // The derivative along `direction` (one vector per param, each the size of
  // the param): (L(θ + h v) - L(θ - h v)) / 2h, by default h = 1e-5.
  double directional_derivative(const std::vector<std::vector<double>>& direction,
                                double step = 1e-5) const;
  size_t param_count() const { return param_positions_.size(); }
  size_t param_size(size_t param) const;

 private:
  double loss_at(const compiler::reference::HostTensorList& inputs) const;

  const compiler::ir::Program* forward_;
  size_t loss_output_;
  compiler::reference::HostTensorList inputs_;
  std::vector<size_t> param_positions_;  // in forward.inputs(), per trainer param
};

}  // namespace grove::testing
