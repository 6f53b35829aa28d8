// compile(): the backend registry, persistent state, and call-time input checks.
#include "compiler/backends/compile.h"

#include <gtest/gtest.h>

#include "compiler/ir/builder.h"
#include "compiler/model_format/model_json.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/device_context.h"

namespace grove {
namespace {

using compiler::backends::CompiledModel;
using compiler::backends::CompileOptions;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::kSimDevice;
using runtime::Tensor;

compiler::ir::Program small_model(runtime::Device device = kSimDevice) {
  ProgramBuilder b("small", device);
  ValueId x = b.input("x", {2, 4});
  ValueId w = b.param("w", {3, 4}, DType::kF32, compiler::ir::normal_init(0.5, 9));
  ValueId bias = b.param("b", {3}, DType::kF32, compiler::ir::uniform_init(-1, 1, 10));
  ValueId steps = b.buffer("steps", {}, DType::kF32, compiler::ir::zeros_init());
  b.output(b.gelu(b.linear(x, w, bias, "fc")));
  b.output(b.copy_into(steps, b.add(steps, b.full(1.0)), "count"));
  return b.build();
}

std::string error_of(const CompiledModel& model, const compiler::TensorList& inputs) {
  try {
    model(inputs);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(Backends, RegistryListsEagerAndRejectsUnknownNames) {
  std::vector<std::string> names = compiler::backends::backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "eager"), names.end());
  try {
    compiler::backends::compile(small_model(), {.backend = "turbo"});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("unknown backend 'turbo'"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("eager"), std::string::npos);
  }
  EXPECT_THROW(
      compiler::backends::register_backend("eager", compiler::backends::make_eager_backend), Error);
}

TEST(Backends, EagerModelOwnsItsStateAndMatchesTheReference) {
  compiler::ir::Program program = small_model();
  CompiledModel model = compiler::backends::compile(program, {.backend = "eager"});
  EXPECT_EQ(model.backend(), "eager");
  EXPECT_EQ(model.input_names(), std::vector<std::string>({"x"}));
  std::vector<float> x = {0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.5f, -2.f, 0.1f};
  Tensor input = Tensor::from_vector(x, {2, 4}, kSimDevice);
  compiler::reference::HostTensorList reference_inputs =
      compiler::reference::initial_state(program);
  reference_inputs[0] = {{2, 4}, DType::kF32, std::vector<double>(x.begin(), x.end())};
  for (int call = 1; call <= 3; ++call) {
    compiler::TensorList outputs = model({input});
    compiler::reference::HostTensorList expected =
        compiler::reference::reference_run_in_place(program, reference_inputs);
    std::vector<double> got = outputs[0].to_doubles();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[0].data[i], 1e-5);
    // The buffer counts calls: it is updated in place across calls.
    EXPECT_EQ(model.state("steps").to_doubles(), std::vector<double>({double(call)}));
    EXPECT_EQ(outputs[1].to_doubles(), std::vector<double>({double(call)}));
  }
  // fc's bias and gelu are the GEMM's epilogue; the step counter is one kernel.
  EXPECT_EQ(model.kernel_report().library_gemms, 1u);
  EXPECT_EQ(model.kernel_report().kernels.size(), 1u) << model.kernel_report().str();
}

TEST(Backends, BadCallInputsGiveErrorsNamingTheInput) {
  CompiledModel model = compiler::backends::compile(small_model());
  Tensor good = Tensor::empty({2, 4}, DType::kF32, kSimDevice);
  EXPECT_NE(error_of(model, {}).find("takes 1 inputs ('x'), found 0"), std::string::npos)
      << error_of(model, {});
  EXPECT_NE(error_of(model, {good, good}).find("found 2"), std::string::npos);
  Tensor wrong_shape = Tensor::empty({3, 4}, DType::kF32, kSimDevice);
  EXPECT_THROW(model({wrong_shape}), ShapeError);
  EXPECT_NE(error_of(model, {wrong_shape}).find("input 'x' (0) expects shape [2, 4], found [3, 4]"),
            std::string::npos)
      << error_of(model, {wrong_shape});
  Tensor wrong_dtype = Tensor::empty({2, 4}, DType::kBF16, kSimDevice);
  EXPECT_THROW(model({wrong_dtype}), DTypeError);
  EXPECT_NE(error_of(model, {wrong_dtype}).find("expects dtype f32, found bf16"),
            std::string::npos);
  Tensor wrong_device = Tensor::empty({2, 4}, DType::kF32, runtime::kCpuDevice);
  EXPECT_THROW(model({wrong_device}), DeviceError);
  EXPECT_NE(error_of(model, {wrong_device}).find("expects a tensor on sim:0, found one on cpu"),
            std::string::npos)
      << error_of(model, {wrong_device});
  EXPECT_NE(error_of(model, {Tensor()}).find("undefined tensor"), std::string::npos);
}

// Note [One input check per call]: bind_inputs() checks the tensors once (with
// the call's errors), and calls with the BoundInputs check nothing again yet
// see what the tensors hold at each call; inputs bound by another model are
// refused.
TEST(Backends, BoundInputsAreCheckedOnceAndReadAtEveryCall) {
  CompiledModel model = compiler::backends::compile(small_model());
  CompiledModel twin = compiler::backends::compile(small_model());
  EXPECT_EQ(model.input_checks(), 0u);
  EXPECT_THROW(model.bind_inputs({Tensor::empty({3, 4}, DType::kF32, kSimDevice)}), ShapeError);
  EXPECT_THROW(model.bind_inputs({}), ShapeError);
  const uint64_t checks = model.input_checks();
  Tensor x = Tensor::from_vector(std::vector<float>(8, 0.5f), {2, 4}, kSimDevice);
  compiler::backends::BoundInputs bound = model.bind_inputs({x});
  EXPECT_EQ(model.input_checks(), checks + 1);
  for (float value : {0.5f, -1.5f, 2.0f}) {
    x.copy_from_host(std::vector<float>(8, value).data());
    std::vector<float> got = model(bound)[0].to_vector<float>();
    std::vector<float> expected = twin({x})[0].to_vector<float>();
    EXPECT_EQ(got, expected) << "x = " << value;
  }
  EXPECT_EQ(model.input_checks(), checks + 1) << "a call with bound inputs checked them again";
  EXPECT_EQ(twin.input_checks(), 3u);
  try {
    twin(bound);
    ADD_FAILURE() << "ran inputs another model bound";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("bound by another model"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(model(compiler::backends::BoundInputs()), Error);
}

TEST(Backends, CompileRetargetsAProgramToTheRequestedDevice) {
  CompiledModel model =
      compiler::backends::compile(small_model(runtime::kCpuDevice), {.device = kSimDevice});
  EXPECT_EQ(model.device(), kSimDevice);
  compiler::TensorList outputs = model({Tensor::empty({2, 4}, DType::kF32, kSimDevice)});
  EXPECT_EQ(outputs[0].device(), kSimDevice);
}

TEST(Backends, CpuProgramsRunAndAreMarkedNotCapturable) {
  CompiledModel model = compiler::backends::compile(small_model(runtime::kCpuDevice));
  const auto& segments = model.lowered().function().segments;
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].blocker, compiler::CaptureBlocker::kCpuTensors);
  std::vector<float> x(8, 0.5f);
  compiler::TensorList outputs = model({Tensor::from_vector(x, {2, 4}, runtime::kCpuDevice)});
  EXPECT_EQ(outputs[0].shape(), runtime::Shape({2, 3}));
}

TEST(Backends, CudaModelsRunWhenADeviceIsPresent) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  compiler::ir::Program program = small_model(runtime::kCudaDevice);
  CompiledModel model = compiler::backends::compile(program);
  std::vector<float> x = {0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.5f, -2.f, 0.1f};
  compiler::TensorList outputs = model({Tensor::from_vector(x, {2, 4}, runtime::kCudaDevice)});
  compiler::reference::HostTensorList inputs = compiler::reference::initial_state(program);
  inputs[0] = {{2, 4}, DType::kF32, std::vector<double>(x.begin(), x.end())};
  compiler::reference::HostTensorList expected =
      compiler::reference::reference_run(program, inputs);
  std::vector<double> got = outputs[0].to_doubles();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[0].data[i], 1e-4);
}

TEST(Backends, BenchmarkModelsCompileAndRunEagerlyOnCudaWhenPresent) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"mlp16x512", "gpt4x256"}) {
    compiler::ir::Program program = compiler::model_format::load_model_file(
        std::string("benchmarks/models/") + name + ".json", {}, runtime::kCudaDevice);
    CompiledModel model = compiler::backends::compile(program);
    compiler::TensorList inputs;
    const auto& value = program.value(program.inputs()[0]);
    inputs.push_back(Tensor::empty(value.type.shape, value.type.dtype, runtime::kCudaDevice));
    if (value.type.dtype == DType::kI64) {
      std::vector<int64_t> ids(static_cast<size_t>(inputs[0].numel()), 3);
      inputs[0] = Tensor::from_vector(ids, value.type.shape, runtime::kCudaDevice);
    }
    EXPECT_EQ(model(inputs).size(), program.outputs().size());
  }
}

}  // namespace
}  // namespace grove
