// Weights files against compiled models (Note [Weights match the model
// exactly]): loading changes the model's outputs to the file's weights, and
// every mismatch names the tensor and leaves the model untouched.
#include "weights/model_weights.h"

#include <gtest/gtest.h>

#include <cstring>

#include "compiler/ir/builder.h"
#include "compiler/ir/generator_state.h"

namespace grove::weights {
namespace {

using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::kSimDevice;
using runtime::Tensor;

// y = x @ w^T + b with x [2, 3], w [2, 3], b [2], and a step-count buffer;
// with_dropout adds a dropout drawing from grove's implicit generator, whose
// buffers are grove's state, not weights.
compiler::ir::Program linear_model(bool with_dropout = false) {
  ProgramBuilder b("linear", kSimDevice);
  ValueId x = b.input("x", {2, 3});
  ValueId w = b.param("w", {2, 3}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  ValueId bias = b.param("b", {2}, DType::kF32, compiler::ir::uniform_init(-1, 1, 4));
  b.buffer("steps", {1}, DType::kI64, compiler::ir::zeros_init());
  ValueId y = b.linear(x, w, bias, "fc");
  b.output(with_dropout ? b.dropout(y, 0.5, "drop") : y);
  return b.build();
}

std::vector<uint8_t> bytes_of(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<TensorToWrite> good_weights() {
  std::vector<uint8_t> steps(8, 0);
  steps[0] = 42;
  return {{"w", DType::kF32, {2, 3}, bytes_of({1, 2, 3, -1, 0.5f, 0.25f})},
          {"b", DType::kF32, {2}, bytes_of({10, -10})},
          {"steps", DType::kI64, {1}, steps}};
}

SafetensorsFile file_of(const std::vector<TensorToWrite>& tensors) {
  return SafetensorsFile::from_bytes(encode_safetensors(tensors), "w.safetensors");
}

std::string error_loading(const CompiledModel& model, const std::vector<TensorToWrite>& tensors) {
  try {
    load_weights(model, file_of(tensors));
  } catch (const WeightsFormatError& error) {
    return error.what();
  }
  return "no error";
}

TEST(ModelWeights, LoadedWeightsDecideTheOutputs) {
  CompiledModel model = compiler::backends::compile(linear_model(), {.backend = "eager"});
  EXPECT_EQ(load_weights(model, file_of(good_weights())), 24u + 8u + 8u);
  Tensor x = Tensor::from_vector<float>({1, 1, 1, 2, 0, -2}, {2, 3}, kSimDevice);
  std::vector<float> y = model({x})[0].to_vector<float>();
  // Row 0: [1+2+3, -1+0.5+0.25] + b; row 1: [2-6, -2-0.5] + b.
  EXPECT_EQ(y, (std::vector<float>{16, -10.25f, 6, -12.5f}));
  EXPECT_EQ(model.state("steps").to_vector<int64_t>(), std::vector<int64_t>{42});
}

TEST(ModelWeights, ExportedWeightsLoadIntoAFreshModelUnchanged) {
  CompiledModel source = compiler::backends::compile(linear_model(), {.backend = "eager"});
  std::vector<TensorToWrite> exported = weights_of(source);
  ASSERT_EQ(exported.size(), 3u);
  EXPECT_EQ(exported[0].name, "b");  // name order
  CompiledModel target = compiler::backends::compile(linear_model(), {.backend = "eager"});
  Tensor(target.state("w")).copy_from_host(bytes_of({0, 0, 0, 0, 0, 0}).data());
  ASSERT_NE(target.state("w").to_host_bytes(), source.state("w").to_host_bytes());
  load_weights(target, file_of(exported));
  EXPECT_EQ(target.state("w").to_host_bytes(), source.state("w").to_host_bytes());
}

TEST(ModelWeights, InitialWeightsAreWhatCompileInitializes) {
  CompiledModel model = compiler::backends::compile(linear_model(), {.backend = "eager"});
  std::vector<TensorToWrite> initial = initial_weights(linear_model());
  std::vector<TensorToWrite> compiled = weights_of(model);
  ASSERT_EQ(initial.size(), compiled.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    EXPECT_EQ(initial[i].name, compiled[i].name);
    EXPECT_EQ(initial[i].bytes, compiled[i].bytes) << initial[i].name;
  }
}

TEST(ModelWeights, MissingAndExtraTensorsAreNamed) {
  CompiledModel model = compiler::backends::compile(linear_model(), {.backend = "eager"});
  std::vector<TensorToWrite> missing = good_weights();
  missing.erase(missing.begin() + 1);
  std::string message = error_loading(model, missing);
  EXPECT_NE(message.find("lacks tensor 'b'"), std::string::npos) << message;

  std::vector<TensorToWrite> extra = good_weights();
  extra.push_back({"fc9.weight", DType::kF32, {1}, bytes_of({1})});
  message = error_loading(model, extra);
  EXPECT_NE(message.find("holds tensor 'fc9.weight'"), std::string::npos) << message;
}

TEST(ModelWeights, WrongShapeOrDtypeIsNamedAndLeavesTheModelUnchanged) {
  CompiledModel model = compiler::backends::compile(linear_model(), {.backend = "eager"});
  const std::vector<uint8_t> before = model.state("w").to_host_bytes();
  std::vector<TensorToWrite> wrong_shape = good_weights();
  wrong_shape[1].shape = {2, 1};
  std::string message = error_loading(model, wrong_shape);
  EXPECT_NE(message.find("tensor 'b'"), std::string::npos) << message;
  EXPECT_NE(message.find("shape [2, 1] but model 'linear' has [2]"), std::string::npos) << message;

  std::vector<TensorToWrite> wrong_dtype = good_weights();
  wrong_dtype[0].dtype = DType::kI32;
  message = error_loading(model, wrong_dtype);
  EXPECT_NE(message.find("tensor 'w': dtype I32 but model 'linear' has f32"), std::string::npos)
      << message;
  EXPECT_EQ(model.state("w").to_host_bytes(), before);
}

TEST(ModelWeights, GeneratorBuffersAreNotWeights) {
  compiler::ir::Program program = linear_model(/*with_dropout=*/true);
  ASSERT_TRUE(compiler::ir::find_generator_state(program).has_value());
  EXPECT_EQ(weight_names(program), (std::vector<std::string>{"b", "steps", "w"}));
  CompiledModel model = compiler::backends::compile(program, {.backend = "eager"});
  load_weights(model, file_of(good_weights()));
  EXPECT_EQ(weights_of(model).size(), 3u);
}

}  // namespace
}  // namespace grove::weights
