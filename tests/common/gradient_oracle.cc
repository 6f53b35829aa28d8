#include "tests/common/gradient_oracle.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace grove::testing {

namespace {
constexpr double kStep = 1e-5;
}  // namespace

GradientOracle::GradientOracle(const training::Trainer& trainer, const compiler::TensorList& inputs)
    : forward_(&trainer.programs().forward), loss_output_(trainer.programs().loss_output) {
  const compiler::ir::Program& forward = *forward_;
  size_t next_input = 0;
  for (compiler::ir::ValueId id : forward.inputs()) {
    const compiler::ir::Value& value = forward.value(id);
    compiler::reference::HostTensor host{value.type.shape, value.type.dtype, {}};
    if (value.kind == compiler::ir::ValueKind::kInput) {
      GROVE_CHECK(next_input < inputs.size(), "GradientOracle: too few inputs for '", value.name,
                  "'");
      host.data = inputs[next_input++].to_doubles();
    } else {
      host.data = trainer.state(value.name).to_doubles();
    }
    inputs_.push_back(std::move(host));
  }
  for (compiler::ir::ValueId param : trainer.programs().params) {
    param_positions_.push_back(static_cast<size_t>(forward.input_position(param)));
  }
}

double GradientOracle::loss_at(const compiler::reference::HostTensorList& inputs) const {
  return compiler::reference::reference_run(*forward_, inputs, {.print_sink = [](const auto&) {}})
      .at(loss_output_)
      .data.at(0);
}

double GradientOracle::loss() const { return loss_at(inputs_); }

size_t GradientOracle::param_size(size_t param) const {
  return inputs_[param_positions_.at(param)].data.size();
}

double GradientOracle::derivative(size_t param, size_t element) const {
  compiler::reference::HostTensorList shifted = inputs_;
  std::vector<double>& data = shifted[param_positions_.at(param)].data;
  const double x = data.at(element);
  const double h = kStep * std::max(1.0, std::abs(x));
  data[element] = x + h;
  const double plus = loss_at(shifted);
  data[element] = x - h;
  const double minus = loss_at(shifted);
  return (plus - minus) / (2 * h);
}

double GradientOracle::directional_derivative(const std::vector<std::vector<double>>& direction,
                                              double step) const {
  auto moved = [&](double scale) {
    compiler::reference::HostTensorList shifted = inputs_;
    for (size_t i = 0; i < param_positions_.size(); ++i) {
      std::vector<double>& data = shifted[param_positions_[i]].data;
      for (size_t j = 0; j < data.size(); ++j) data[j] += scale * direction.at(i).at(j);
    }
    return loss_at(shifted);
  };
  return (moved(step) - moved(-step)) / (2 * step);
}

}  // namespace grove::testing
