#include "tests/fuzz/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/error.h"
#include "runtime/philox_generator.h"
#include "tests/common/gradient_oracle.h"
#include "tests/fuzz/program_generator.h"
#include "training/trainer.h"

namespace grove::fuzz {

namespace {

using compiler::TensorList;
using compiler::ir::Program;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::Tensor;

constexpr double kBound = 1e-3;
// f32 gradients of values beyond this carry more than kBound of rounding.
constexpr double kLargestChecked = 1e4;
constexpr int kDirections = 2;

GeneratorOptions gradient_options() {
  GeneratorOptions options;
  options.gradients = true;
  options.host_sync_probability = 0;
  options.mutation_probability = 0;
  return options;
}

TensorList random_inputs(const Program& program, runtime::Device device, std::mt19937_64& rng) {
  TensorList inputs;
  for (ValueId input : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    const compiler::ir::TensorType& type = program.value(input).type;
    auto count = static_cast<size_t>(runtime::shape_numel(type.shape));
    if (type.dtype == DType::kI64) {
      std::vector<int64_t> ids(count);
      for (int64_t& id : ids) id = std::uniform_int_distribution<int64_t>(0, kTokenRange - 1)(rng);
      inputs.push_back(Tensor::from_vector(ids, type.shape, device));
    } else {
      std::vector<float> values(count);
      for (float& v : values) v = std::uniform_real_distribution<float>(-2, 2)(rng);
      inputs.push_back(Tensor::from_vector(values, type.shape, device));
    }
  }
  return inputs;
}

std::string mismatch(const std::string& what, double got, double expected, double scale) {
  const double error = std::abs(got - expected) / std::max(1.0, scale);
  if (error <= kBound) return "";
  std::ostringstream out;
  out << what << ": grove " << got << ", f64 reference " << expected << " (error " << error
      << " of max(1, " << scale << "))";
  return out.str();
}

// Each param's part of a failed directional check, to name the wrong gradient.
std::string by_param(const testing::GradientOracle& oracle, const std::vector<std::string>& params,
                     const std::vector<std::vector<double>>& gradients,
                     const std::vector<std::vector<double>>& direction) {
  std::ostringstream out;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<std::vector<double>> alone = direction;
    double analytic = 0;
    for (size_t k = 0; k < alone.size(); ++k) {
      for (size_t j = 0; j < alone[k].size(); ++j) {
        if (k != i) alone[k][j] = 0;
        if (k == i) analytic += gradients[k][j] * direction[k][j];
      }
    }
    out << "\n  " << params[i] << ": grove " << analytic << ", f64 reference "
        << oracle.directional_derivative(alone, 1e-6);
  }
  return out.str();
}

// One case; returns "" when it passes, else what failed first.
std::string check(const Program& program, const std::string& backend, runtime::Device device,
                  uint64_t seed, int steps, DifferentialOutcome& outcome) {
  training::Trainer trainer(program, program.outputs().back(), {.backend = backend});
  runtime::PhiloxGenerator& generator = runtime::default_generator(device);
  const auto draws = static_cast<uint64_t>(trainer.forward_stage().generator_draws());
  if (trainer.backward_stage().generator_draws() != 0) {
    return "the backward draws " + std::to_string(trainer.backward_stage().generator_draws()) +
           " numbers from the generator; it must reuse the forward's";
  }
  std::vector<std::string> params;
  for (ValueId param : trainer.programs().params) params.push_back(program.value(param).name);
  std::mt19937_64 rng(seed);
  generator.manual_seed(seed);
  for (int step = 0; step < steps; ++step) {
    const std::string at = "step " + std::to_string(step) + ": ";
    TensorList inputs = random_inputs(program, device, rng);
    const uint64_t before = generator.offset();
    const double loss = trainer.forward_backward(inputs).to_doubles().at(0);
    ++outcome.calls;
    if (generator.offset() - before != draws) {
      return at + "one step advanced the generator by " +
             std::to_string(generator.offset() - before) + ", the forward draws " +
             std::to_string(draws);
    }
    testing::GradientOracle oracle(trainer, inputs);
    const double expected_loss = oracle.loss();
    // A program whose values overflow (chained exp and pow) has nothing to check.
    if (!std::isfinite(expected_loss) || std::abs(expected_loss) > kLargestChecked) {
      ++outcome.skipped_checks;
      break;
    }
    std::string failure = mismatch(at + "loss", loss, expected_loss, std::abs(expected_loss));
    if (!failure.empty()) return failure;
    std::vector<std::vector<double>> gradients;
    for (const std::string& name : params) {
      gradients.push_back(
          trainer.state(compiler::autodiff::gradient_buffer_name(name)).to_doubles());
    }
    for (int d = 0; d < kDirections; ++d) {
      std::vector<std::vector<double>> direction = gradients;
      double analytic = 0, scale = 0;
      for (size_t i = 0; i < gradients.size(); ++i) {
        for (size_t j = 0; j < gradients[i].size(); ++j) {
          direction[i][j] = std::normal_distribution<double>()(rng);
          analytic += gradients[i][j] * direction[i][j];
          scale += std::abs(gradients[i][j] * direction[i][j]);
        }
      }
      if (scale > kLargestChecked) {
        ++outcome.skipped_checks;
        continue;
      }
      // Differences over two steps that disagree: a kink (relu, max, a
      // comparison) lies within a step, where the loss has no derivative.
      const double numeric = oracle.directional_derivative(direction, 1e-6);
      if (std::abs(oracle.directional_derivative(direction, 1e-5) - numeric) >
          kBound * std::max(1.0, scale)) {
        ++outcome.skipped_checks;
        continue;
      }
      failure = mismatch(at + "direction " + std::to_string(d) + ": sum(grad * v)", analytic,
                         numeric, scale);
      if (!failure.empty()) return failure + by_param(oracle, params, gradients, direction);
    }
  }
  // Read while the trainer lives: its manager goes with its last function.
  if (backend == "cudagraphs")
    outcome.replays =
        static_cast<int>(cudagraph_trees::tree_manager_for(device).counters().replays);
  return "";
}

}  // namespace

DifferentialOutcome run_gradient_check(uint64_t seed, runtime::Device device, int steps) {
  cudagraph_trees::backend::register_cudagraphs_backend();
  cudagraph_trees::reset_tree_managers();
  DifferentialOutcome outcome;
  const std::string backend = seed % 2 == 0 ? "eager" : "cudagraphs";
  Program program = generate_program(seed, device, gradient_options());
  std::string failure;
  try {
    failure = check(program, backend, device, seed, steps, outcome);
  } catch (const std::exception& error) {
    failure = std::string("threw: ") + error.what();
  }
  if (!failure.empty()) {
    outcome.passed = false;
    outcome.failure = "gradients on " + backend + ": " + failure + "\nprogram:\n" + program.str();
  }
  cudagraph_trees::reset_tree_managers();
  return outcome;
}

}  // namespace grove::fuzz
