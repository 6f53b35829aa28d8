// grove_optimizer_program (capi/grove.h): the optimizer step the Trainer
// builds, handed out as grove JSON. With the gradients as inputs, compiled
// through grove_compile on sim with the params bound to caller memory, two
// steps of SGD with momentum and of AdamW update the params as PyTorch's
// formulas do; by default the text is exactly the Trainer's program; bad
// requests fail with a status and a message and leave the API usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "capi/grove.h"
#include "compiler/model_format/model_json.h"
#include "training/optimizer.h"

namespace {

// The program text for `request`, or "" with the test failed.
std::string program_for(const std::string& request) {
  char* text = nullptr;
  grove_status status = grove_optimizer_program(request.c_str(), &text);
  EXPECT_EQ(status, GROVE_OK) << grove_last_error();
  if (status != GROVE_OK) return "";
  std::string program = text;
  grove_string_free(text);
  return program;
}

grove_tensor_desc host_f32(float* data, const int64_t* shape, int32_t rank) {
  grove_tensor_desc desc{};
  desc.data = data;
  desc.dtype = GROVE_F32;
  desc.device_type = GROVE_DEVICE_SIM;
  desc.rank = rank;
  desc.shape = shape;
  return desc;
}

std::vector<float> random_values(std::mt19937& rng, size_t count) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = dist(rng);
  return values;
}

std::vector<std::string> input_names(grove_model* model) {
  size_t count = 0;
  EXPECT_EQ(grove_model_input_count(model, &count), GROVE_OK);
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    EXPECT_EQ(grove_model_input_name(model, i, &name), GROVE_OK);
    names.emplace_back(name);
  }
  return names;
}

const char* kParams =
    R"("params": [{"name": "w", "shape": [2, 3], "dtype": "f32"},
                  {"name": "b", "shape": [3], "dtype": "f32"}])";

// Runs two steps of `optimizer` over params w [2, 3] and b [3] bound to host
// memory, with `hyper` as the hyper-parameter inputs (the step count, for
// AdamW, is written per step), and checks every param element after each step
// against `expected_step(param, grad, state, step)`, which updates its copies.
template <typename ExpectedStep>
void check_two_steps(const char* optimizer, std::vector<float> hyper, size_t state_count,
                     ExpectedStep expected_step) {
  const uint32_t seed = 7;
  SCOPED_TRACE(std::string(optimizer) + ", seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::string program = program_for(std::string(R"({"optimizer": ")") + optimizer +
                                    R"(", "gradients": "inputs", )" + kParams + "}");
  ASSERT_FALSE(program.empty());
  const int64_t w_shape[2] = {2, 3};
  const int64_t b_shape[1] = {3};
  std::vector<float> w = random_values(rng, 6);
  std::vector<float> b = random_values(rng, 3);
  grove_state_binding bindings[2] = {{"w", host_f32(w.data(), w_shape, 2)},
                                     {"b", host_f32(b.data(), b_shape, 1)}};
  grove_model* model = nullptr;
  ASSERT_EQ(grove_compile(program.c_str(), R"({"device": "sim", "stage": "optimizer"})", bindings,
                          2, &model),
            GROVE_OK)
      << grove_last_error();
  std::vector<std::string> names = input_names(model);
  ASSERT_EQ(names.size(), hyper.size() + 2);
  EXPECT_EQ(names[hyper.size()], "grad.w");
  EXPECT_EQ(names[hyper.size() + 1], "grad.b");
  size_t output_count = 1;
  ASSERT_EQ(grove_model_output_count(model, &output_count), GROVE_OK);
  EXPECT_EQ(output_count, 0u) << "the step's effect is the in-place update";

  std::vector<std::vector<double>> expected_params = {{w.begin(), w.end()}, {b.begin(), b.end()}};
  std::vector<std::vector<std::vector<double>>> states(
      2, std::vector<std::vector<double>>(state_count));
  for (size_t p = 0; p < 2; ++p) {
    for (auto& state : states[p]) state.assign(expected_params[p].size(), 0.0);
  }
  for (int step = 1; step <= 2; ++step) {
    if (names[hyper.size() - 1] == "step") hyper.back() = static_cast<float>(step);
    std::vector<float> grad_w = random_values(rng, 6);
    std::vector<float> grad_b = random_values(rng, 3);
    std::vector<grove_tensor_desc> inputs;
    for (float& value : hyper) inputs.push_back(host_f32(&value, nullptr, 0));
    inputs.push_back(host_f32(grad_w.data(), w_shape, 2));
    inputs.push_back(host_f32(grad_b.data(), b_shape, 1));
    size_t count = 1;
    ASSERT_EQ(grove_model_run(model, inputs.data(), inputs.size(), nullptr, nullptr, 0, &count),
              GROVE_OK)
        << grove_last_error();
    const std::vector<float>* grads[2] = {&grad_w, &grad_b};
    const std::vector<float>* actual[2] = {&w, &b};
    for (size_t p = 0; p < 2; ++p) {
      std::vector<double> grad(grads[p]->begin(), grads[p]->end());
      expected_step(expected_params[p], grad, states[p], step);
      for (size_t i = 0; i < expected_params[p].size(); ++i) {
        EXPECT_NEAR((*actual[p])[i], expected_params[p][i],
                    1e-5 * (1 + std::abs(expected_params[p][i])))
            << "param " << p << " element " << i << " after step " << step;
      }
    }
  }
  grove_model_destroy(model);
}

TEST(OptimizerProgram, SgdWithMomentumUpdatesBoundParamsLikePyTorch) {
  const double lr = 0.1, momentum = 0.9, decay = 0.01;
  check_two_steps("sgd_momentum", {0.1f, 0.9f, 0.01f}, 1,
                  [&](std::vector<double>& param, const std::vector<double>& grad,
                      std::vector<std::vector<double>>& state, int) {
                    for (size_t i = 0; i < param.size(); ++i) {
                      double g = grad[i] + decay * param[i];
                      state[0][i] = momentum * state[0][i] + g;
                      param[i] -= lr * state[0][i];
                    }
                  });
}

TEST(OptimizerProgram, AdamWUpdatesBoundParamsLikePyTorch) {
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, decay = 0.1;
  check_two_steps("adamw", {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f}, 2,
                  [&](std::vector<double>& param, const std::vector<double>& grad,
                      std::vector<std::vector<double>>& state, int step) {
                    for (size_t i = 0; i < param.size(); ++i) {
                      double& m = state[0][i];
                      double& v = state[1][i];
                      m = beta1 * m + (1 - beta1) * grad[i];
                      v = beta2 * v + (1 - beta2) * grad[i] * grad[i];
                      double m_hat = m / (1 - std::pow(beta1, step));
                      double v_hat = v / (1 - std::pow(beta2, step));
                      param[i] -= lr * (decay * param[i] + m_hat / (std::sqrt(v_hat) + eps));
                    }
                  });
}

TEST(OptimizerProgram, ByDefaultTheTextIsTheTrainersProgram) {
  namespace training = grove::training;
  std::string program =
      program_for(std::string(R"({"optimizer": "adamw", "name": "net", )") + kParams + "}");
  grove::compiler::ir::Program model = grove::compiler::model_format::load_model(
      R"({"name": "net", "inputs": [], "nodes": [], "outputs": [], "params": [
           {"name": "w", "shape": [2, 3], "dtype": "f32", "init": {"kind": "zeros"}},
           {"name": "b", "shape": [3], "dtype": "f32", "init": {"kind": "zeros"}}]})");
  training::OptimizerProgram trainers = training::build_optimizer_program(
      model, model.inputs_of_kind(grove::compiler::ir::ValueKind::kParam),
      training::OptimizerKind::kAdamW);
  EXPECT_EQ(program, grove::compiler::model_format::export_model(trainers.program));
  EXPECT_NE(program.find("\"grad.w\""), std::string::npos);
}

TEST(OptimizerProgram, BadRequestsFailWithAStatusAndAMessage) {
  struct Case {
    std::string request;
    grove_status status;
    const char* message;
  };
  const std::string params = kParams;
  const std::vector<Case> cases = {
      {R"({"optimizer": "lamb", )" + params + "}", GROVE_ERROR_INVALID_ARGUMENT,
       "unknown optimizer 'lamb'"},
      {R"({"params": []})", GROVE_ERROR_INVALID_ARGUMENT, "field 'optimizer'"},
      {R"({"optimizer": "adamw", "params": []})", GROVE_ERROR_INVALID_ARGUMENT, "non-empty array"},
      {R"({"optimizer": "adamw", "lr": 1, )" + params + "}", GROVE_ERROR_INVALID_ARGUMENT,
       "unknown request field 'lr'"},
      {R"({"optimizer": "adamw", "gradients": "grads", )" + params + "}",
       GROVE_ERROR_INVALID_ARGUMENT, "field 'gradients'"},
      {R"({"optimizer": "sgd_momentum", "params": [{"name": "n", "shape": [2], "dtype": "i32"}]})",
       GROVE_ERROR_DTYPE, "only floating params"},
      {R"({"optimizer": "adamw", "params": [{"name": "w", "shape": "two", "dtype": "f32"}]})",
       GROVE_ERROR_MODEL_FORMAT, "shape"},
      {R"({"optimizer": "adamw", )", GROVE_ERROR_MODEL_FORMAT, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request);
    char* text = nullptr;
    EXPECT_EQ(grove_optimizer_program(c.request.c_str(), &text), c.status);
    EXPECT_EQ(text, nullptr);
    std::string message = grove_last_error();
    EXPECT_NE(message.find("grove_optimizer_program"), std::string::npos) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
  EXPECT_EQ(grove_optimizer_program(nullptr, nullptr), GROVE_ERROR_INVALID_ARGUMENT);
  char* text = nullptr;
  EXPECT_EQ(grove_optimizer_program(nullptr, &text), GROVE_ERROR_INVALID_ARGUMENT);
  // The API stays usable after every failure.
  EXPECT_FALSE(
      program_for(std::string(R"({"optimizer": "sgd_momentum", )") + kParams + "}").empty());
}

}  // namespace
