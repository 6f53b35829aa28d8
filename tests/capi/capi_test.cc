// The C API (capi/grove.h) on sim: results equal CompiledModel's, caller
// memory is viewed and never copied, replay outputs report being overwritten,
// DLPack tensors keep their memory alive, and every failing call returns a
// status with a message and releases what it was handed exactly once.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi/grove.h"
#include "compiler/backends/compile.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace {

// x [batch, 8] -> linear(w [16, 8], b [16]) -> gelu -> layer_norm -> linear(v [4, 16]).
const char* kMlp = R"({
  "name": "capi_mlp", "dims": {"batch": 3},
  "inputs": [{"name": "x", "shape": ["batch", 8], "dtype": "f32"}],
  "params": [
    {"name": "w", "shape": [16, 8], "dtype": "f32", "init": {"kind": "normal", "std": 0.3, "seed": 1}},
    {"name": "b", "shape": [16], "dtype": "f32", "init": {"kind": "uniform", "low": -0.1, "high": 0.1, "seed": 2}},
    {"name": "g", "shape": [16], "dtype": "f32", "init": {"kind": "ones"}},
    {"name": "beta", "shape": [16], "dtype": "f32", "init": {"kind": "zeros"}},
    {"name": "v", "shape": [4, 16], "dtype": "f32", "init": {"kind": "normal", "std": 0.3, "seed": 3}}],
  "nodes": [
    {"name": "h", "op": "linear", "inputs": ["x", "w", "b"]},
    {"name": "a", "op": "gelu", "inputs": ["h"]},
    {"name": "n", "op": "layer_norm", "inputs": ["a", "g", "beta"]},
    {"name": "y", "op": "linear", "inputs": ["n", "v"]}],
  "outputs": ["y", "a"]
})";

const int64_t kShape[2] = {3, 8};

std::vector<float> random_values(std::mt19937& rng, size_t count) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> values(count);
  for (float& value : values) value = dist(rng);
  return values;
}

// Counts how often grove released a caller's tensor.
struct ReleaseCounter {
  int count = 0;
  static void release(void* context) { ++static_cast<ReleaseCounter*>(context)->count; }
};

grove_tensor_desc describe(float* data, const int64_t* shape, int32_t rank,
                           ReleaseCounter* counter = nullptr) {
  grove_tensor_desc desc{};
  desc.data = data;
  desc.dtype = GROVE_F32;
  desc.device_type = GROVE_DEVICE_SIM;
  desc.device_index = 0;
  desc.rank = rank;
  desc.shape = shape;
  desc.strides = nullptr;
  desc.release = counter ? &ReleaseCounter::release : nullptr;
  desc.release_context = counter;
  return desc;
}

grove_model* compile_or_fail(const char* options, const grove_state_binding* bindings = nullptr,
                             size_t binding_count = 0) {
  grove_model* model = nullptr;
  grove_status status = grove_compile(kMlp, options, bindings, binding_count, &model);
  EXPECT_EQ(status, GROVE_OK) << grove_last_error();
  return model;
}

std::vector<float> host_values(const grove_tensor* tensor) {
  int32_t rank = 0;
  EXPECT_EQ(grove_tensor_rank(tensor, &rank), GROVE_OK);
  std::vector<int64_t> shape(static_cast<size_t>(rank));
  EXPECT_EQ(grove_tensor_shape(tensor, shape.data()), GROVE_OK);
  size_t numel = 1;
  for (int64_t extent : shape) numel *= static_cast<size_t>(extent);
  std::vector<float> values(numel);
  EXPECT_EQ(grove_tensor_copy_to_host(tensor, values.data(), numel * sizeof(float)), GROVE_OK)
      << grove_last_error();
  return values;
}

class CApiBackends : public ::testing::TestWithParam<const char*> {};

TEST_P(CApiBackends, RunMatchesCompiledModelBitwiseOverSeveralCalls) {
  using namespace grove;
  std::string options = std::string(R"({"device": "sim:0", "backend": ")") + GetParam() + "\"}";
  grove_model* model = compile_or_fail(options.c_str());
  ASSERT_NE(model, nullptr);
  size_t inputs = 0, outputs = 0;
  ASSERT_EQ(grove_model_input_count(model, &inputs), GROVE_OK);
  ASSERT_EQ(grove_model_output_count(model, &outputs), GROVE_OK);
  EXPECT_EQ(inputs, 1u);
  EXPECT_EQ(outputs, 2u);
  const char* name = nullptr;
  ASSERT_EQ(grove_model_input_name(model, 0, &name), GROVE_OK);
  EXPECT_STREQ(name, "x");

  compiler::backends::CompiledModel reference = compiler::backends::compile(
      compiler::model_format::load_model(kMlp, {}, runtime::kSimDevice), {.backend = "eager"});
  std::mt19937 rng(11);
  for (int call = 0; call < 5; ++call) {
    SCOPED_TRACE("seed 11, call " + std::to_string(call));
    std::vector<float> x = random_values(rng, 24);
    ReleaseCounter released;
    grove_tensor_desc desc = describe(x.data(), kShape, 2, &released);
    grove_tensor* results[2] = {nullptr, nullptr};
    size_t count = 0;
    ASSERT_EQ(grove_model_run(model, &desc, 1, nullptr, results, 2, &count), GROVE_OK)
        << grove_last_error();
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(released.count, 1) << "grove released the caller's input once, after the call";
    compiler::TensorList expected =
        reference({runtime::Tensor::from_vector(x, {3, 8}, runtime::kSimDevice)});
    EXPECT_EQ(host_values(results[0]), expected[0].to_vector<float>());
    EXPECT_EQ(host_values(results[1]), expected[1].to_vector<float>());
    int32_t dtype = -1, device_type = -1, device_index = -1;
    ASSERT_EQ(grove_tensor_dtype(results[0], &dtype), GROVE_OK);
    ASSERT_EQ(grove_tensor_device(results[0], &device_type, &device_index), GROVE_OK);
    EXPECT_EQ(dtype, GROVE_F32);
    EXPECT_EQ(device_type, GROVE_DEVICE_SIM);
    grove_tensor_destroy(results[0]);
    grove_tensor_destroy(results[1]);
  }
  char* stats = nullptr;
  ASSERT_EQ(grove_model_stats_json(model, &stats), GROVE_OK);
  EXPECT_EQ(stats[0], '{');
  if (std::string(GetParam()) == "cudagraphs") {
    EXPECT_NE(std::string(stats).find("cudagraphs"), std::string::npos) << stats;
    char* dot = nullptr;
    ASSERT_EQ(grove_model_dot(model, &dot), GROVE_OK);
    EXPECT_NE(std::string(dot).find("digraph"), std::string::npos) << dot;
    grove_string_free(dot);
  }
  grove_string_free(stats);
  EXPECT_EQ(grove_model_mark_step_begin(model), GROVE_OK);
  grove_model_destroy(model);
}

INSTANTIATE_TEST_SUITE_P(Backends, CApiBackends, ::testing::Values("eager", "cudagraphs"));

TEST(CApi, BoundParamsViewCallerMemoryAndAreNeverCopied) {
  for (const char* backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    std::mt19937 rng(5);
    std::vector<float> w = random_values(rng, 16 * 8);
    const int64_t w_shape[2] = {16, 8};
    ReleaseCounter w_released;
    grove_state_binding binding{"w", describe(w.data(), w_shape, 2, &w_released)};
    std::string options = std::string(R"({"device": "sim", "backend": ")") + backend + "\"}";
    grove_model* model = compile_or_fail(options.c_str(), &binding, 1);
    ASSERT_NE(model, nullptr);
    grove_tensor* state = nullptr;
    ASSERT_EQ(grove_model_state(model, "w", &state), GROVE_OK) << grove_last_error();
    void* address = nullptr;
    ASSERT_EQ(grove_tensor_data(state, &address), GROVE_OK);
    EXPECT_EQ(address, w.data()) << "the bound param is the caller's memory";
    grove_tensor_destroy(state);

    std::vector<float> x = random_values(rng, 24);
    grove_tensor_desc desc = describe(x.data(), kShape, 2);
    auto run_first_output = [&] {
      grove_tensor* results[2];
      size_t count = 0;
      EXPECT_EQ(grove_model_run(model, &desc, 1, nullptr, results, 2, &count), GROVE_OK)
          << grove_last_error();
      std::vector<float> values = host_values(results[1]);
      grove_tensor_destroy(results[0]);
      grove_tensor_destroy(results[1]);
      return values;
    };
    std::vector<float> before;
    for (int call = 0; call < 4; ++call) before = run_first_output();  // warm-up, record, replays
    for (float& value : w) value = -value;  // the caller updates its weight in place
    std::vector<float> after = run_first_output();
    // gelu(-h + b) differs from gelu(h + b): the replay read the caller's new weight.
    EXPECT_NE(before, after);
    for (float& value : w) value = -value;
    EXPECT_EQ(run_first_output(), before);
    EXPECT_EQ(w_released.count, 0) << "the model still views the weight";
    grove_model_destroy(model);
    EXPECT_EQ(w_released.count, 1) << "destroying the model released the bound weight once";
  }
}

TEST(CApi, ReplayOutputOverwrittenByALaterReplayIsReportedStale) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(3);
  std::vector<float> x = random_values(rng, 24);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  grove_tensor* results[2];
  size_t count = 0;
  for (int call = 0; call < 3; ++call) {  // warm-up, record, replay
    ASSERT_EQ(grove_model_run(model, &desc, 1, nullptr, results, 2, &count), GROVE_OK)
        << grove_last_error();
    if (call < 2) {
      grove_tensor_destroy(results[0]);
      grove_tensor_destroy(results[1]);
    }
  }
  grove_tensor* kept = results[0];
  grove_tensor_destroy(results[1]);
  int32_t valid = -1;
  ASSERT_EQ(grove_tensor_is_valid(kept, &valid), GROVE_OK);
  EXPECT_EQ(valid, 1);
  void* managed = nullptr;
  ASSERT_EQ(grove_tensor_to_dlpack(kept, &managed), GROVE_OK) << grove_last_error();

  ASSERT_EQ(grove_model_run(model, &desc, 1, nullptr, results, 2, &count), GROVE_OK)
      << grove_last_error();
  ASSERT_EQ(grove_tensor_is_valid(kept, &valid), GROVE_OK);
  EXPECT_EQ(valid, 0) << "the next replay overwrote the kept output";
  void* data = nullptr;
  EXPECT_EQ(grove_tensor_data(kept, &data), GROVE_ERROR_STALE);
  EXPECT_NE(std::string(grove_last_error()).find("overwrote"), std::string::npos)
      << grove_last_error();
  void* second = nullptr;
  EXPECT_EQ(grove_tensor_to_dlpack(kept, &second), GROVE_ERROR_STALE);
  EXPECT_EQ(second, nullptr);
  auto* dl = static_cast<DLManagedTensor*>(managed);
  dl->deleter(dl);
  grove_tensor_destroy(kept);
  grove_tensor_destroy(results[0]);
  grove_tensor_destroy(results[1]);
  grove_model_destroy(model);
}

TEST(CApi, DlpackTensorDescribesTheOutputAndOutlivesItsHandle) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "eager"})");
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(9);
  std::vector<float> x = random_values(rng, 24);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  grove_tensor* results[2];
  size_t count = 0;
  ASSERT_EQ(grove_model_run(model, &desc, 1, nullptr, results, 2, &count), GROVE_OK)
      << grove_last_error();
  std::vector<float> expected = host_values(results[0]);
  void* managed = nullptr;
  ASSERT_EQ(grove_tensor_to_dlpack(results[0], &managed), GROVE_OK) << grove_last_error();
  void* data = nullptr;
  ASSERT_EQ(grove_tensor_data(results[0], &data), GROVE_OK);
  grove_tensor_destroy(results[0]);  // the DLPack tensor holds its own reference
  grove_tensor_destroy(results[1]);
  grove_model_destroy(model);
  auto* dl = static_cast<DLManagedTensor*>(managed);
  EXPECT_EQ(dl->dl_tensor.data, data);
  EXPECT_EQ(dl->dl_tensor.device.device_type, kDLCPU) << "sim memory is host memory";
  ASSERT_EQ(dl->dl_tensor.ndim, 2);
  EXPECT_EQ(dl->dl_tensor.shape[0], 3);
  EXPECT_EQ(dl->dl_tensor.shape[1], 4);
  EXPECT_EQ(dl->dl_tensor.strides[0], 4);
  EXPECT_EQ(dl->dl_tensor.strides[1], 1);
  EXPECT_EQ(dl->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(dl->dl_tensor.dtype.bits, 32);
  std::vector<float> read(12);
  std::memcpy(read.data(), dl->dl_tensor.data, read.size() * sizeof(float));
  EXPECT_EQ(read, expected);
  dl->deleter(dl);  // releases grove's last reference (ASan checks the memory goes)
}

TEST(CApi, StridedInputsAreReadThroughTheirStrides) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "eager"})");
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(21);
  std::vector<float> wide = random_values(rng, 3 * 16);  // x is every other column
  std::vector<float> packed(24);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) packed[r * 8 + c] = wide[r * 16 + c * 2];
  const int64_t strides[2] = {16, 2};
  grove_tensor_desc strided = describe(wide.data(), kShape, 2);
  strided.strides = strides;
  grove_tensor_desc contiguous = describe(packed.data(), kShape, 2);
  grove_tensor* a[2];
  grove_tensor* b[2];
  size_t count = 0;
  ASSERT_EQ(grove_model_run(model, &strided, 1, nullptr, a, 2, &count), GROVE_OK)
      << grove_last_error();
  ASSERT_EQ(grove_model_run(model, &contiguous, 1, nullptr, b, 2, &count), GROVE_OK);
  EXPECT_EQ(host_values(a[0]), host_values(b[0]));
  for (grove_tensor* tensor : {a[0], a[1], b[0], b[1]}) grove_tensor_destroy(tensor);
  grove_model_destroy(model);
}

// One failing call: its status, a word its message must contain.
void expect_failure(grove_status status, grove_status expected, const std::string& word) {
  EXPECT_EQ(status, expected) << grove_last_error();
  std::string message = grove_last_error();
  EXPECT_NE(message.find(word), std::string::npos)
      << "message '" << message << "' lacks '" << word << "'";
}

// The lowered steps of a cudagraphs model compiled with `options` (x: batch 3).
std::string lowered_steps(const char* options) {
  grove_model* model = compile_or_fail(options);
  if (model == nullptr) return "";
  std::vector<float> x(3 * 8, 0.5f);
  grove_tensor_desc input = describe(x.data(), kShape, 2);
  grove_tensor* results[2] = {nullptr, nullptr};
  size_t count = 0;
  EXPECT_EQ(grove_model_run(model, &input, 1, nullptr, results, 2, &count), GROVE_OK)
      << grove_last_error();
  for (grove_tensor* result : results) grove_tensor_destroy(result);
  char* stats = nullptr;
  EXPECT_EQ(grove_model_stats_json(model, &stats), GROVE_OK);
  const std::string text = nlohmann::json::parse(stats)["programs"][0]["lowered"];
  grove_string_free(stats);
  grove_model_destroy(model);
  return text;
}

// The "small_m_gemm" option (Note [Small-M GEMM selection]) picks grove's
// small-M kernel for its model alone, before GROVE_SMALL_M_GEMM, and changes
// nothing in the environment; "" leaves the choice to the variable.
TEST(CApi, SmallMGemmOptionChoosesForItsModelBeforeTheEnvironment) {
  grove::testing::ScopedEnv library("GROVE_SMALL_M_GEMM", "off");
  const std::string on =
      lowered_steps(R"({"device": "sim", "backend": "cudagraphs", "small_m_gemm": "on"})");
  EXPECT_NE(on.find("kernel small_m_gemm_bias_gelu"), std::string::npos) << on;
  EXPECT_EQ(on.find("gemm x1"), std::string::npos) << on;
  EXPECT_STREQ(std::getenv("GROVE_SMALL_M_GEMM"), "off");
  for (const char* options : {R"({"device": "sim", "backend": "cudagraphs", "small_m_gemm": ""})",
                              R"({"device": "sim", "backend": "cudagraphs"})"}) {
    const std::string steps = lowered_steps(options);
    EXPECT_EQ(steps.find("small_m_gemm"), std::string::npos) << options << "\n" << steps;
    EXPECT_NE(steps.find("gemm x1 m=3 n=16 k=8 batch=1 +bias_gelu"), std::string::npos) << steps;
  }
  grove::testing::ScopedEnv kernel("GROVE_SMALL_M_GEMM", "on");
  const std::string off =
      lowered_steps(R"({"device": "sim", "backend": "cudagraphs", "small_m_gemm": "off"})");
  EXPECT_EQ(off.find("small_m_gemm"), std::string::npos) << off;
}

// The "gemm_search" option (Note [GEMM algorithms by measurement]) marks its
// model's library GEMMs for the search, and only its model's; a value that is
// not a boolean is refused naming the option.
TEST(CApi, GemmSearchOptionMarksItsModelsGemms) {
  grove::testing::ScopedEnv library("GROVE_SMALL_M_GEMM", "off");  // a library GEMM
  const std::string searched =
      lowered_steps(R"({"device": "sim", "backend": "cudagraphs", "gemm_search": true})");
  EXPECT_NE(searched.find("gemm x1 m=3 n=16 k=8 batch=1 +bias_gelu searched"), std::string::npos)
      << searched;
  for (const char* options : {R"({"device": "sim", "backend": "cudagraphs", "gemm_search": false})",
                              R"({"device": "sim", "backend": "cudagraphs"})"}) {
    const std::string steps = lowered_steps(options);
    EXPECT_NE(steps.find("+bias_gelu"), std::string::npos) << steps;
    EXPECT_EQ(steps.find("searched"), std::string::npos) << options << "\n" << steps;
  }
  grove_model* model = nullptr;
  expect_failure(
      grove_compile(kMlp, R"({"device": "sim", "gemm_search": "yes"})", nullptr, 0, &model),
      GROVE_ERROR_INVALID_ARGUMENT, "'gemm_search' must be true or false");
  EXPECT_EQ(model, nullptr);
}

TEST(CApi, EveryFailingCallSetsAStatusAndAMessage) {
  grove_model* model = nullptr;
  expect_failure(grove_compile(nullptr, nullptr, nullptr, 0, &model), GROVE_ERROR_INVALID_ARGUMENT,
                 "program text is null");
  expect_failure(grove_compile(kMlp, nullptr, nullptr, 0, nullptr), GROVE_ERROR_INVALID_ARGUMENT,
                 "`model` is null");
  expect_failure(grove_compile("{not json", R"({"device": "sim"})", nullptr, 0, &model),
                 GROVE_ERROR_MODEL_FORMAT, "");
  EXPECT_EQ(model, nullptr);
  expect_failure(grove_compile(kMlp, "[1]", nullptr, 0, &model), GROVE_ERROR_INVALID_ARGUMENT,
                 "JSON object");
  expect_failure(grove_compile(kMlp, R"({"device": "sim", "bakend": "eager"})", nullptr, 0, &model),
                 GROVE_ERROR_INVALID_ARGUMENT, "unknown option 'bakend'");
  expect_failure(grove_compile(kMlp, R"({"device": "sim", "backend": "nope"})", nullptr, 0, &model),
                 GROVE_ERROR_INTERNAL, "nope");
  expect_failure(
      grove_compile(kMlp, R"({"device": "sim", "small_m_gemm": "fast"})", nullptr, 0, &model),
      GROVE_ERROR_INVALID_ARGUMENT, "option 'small_m_gemm'");
  expect_failure(grove_compile(kMlp, R"({"device": "tpu:0"})", nullptr, 0, &model),
                 GROVE_ERROR_DEVICE, "tpu");

  // Bindings: unknown name, wrong shape, not contiguous; each released once.
  std::vector<float> w(16 * 8, 0.5f);
  const int64_t w_shape[2] = {16, 8};
  const int64_t wrong_shape[2] = {8, 16};
  const int64_t transposed[2] = {1, 16};
  ReleaseCounter released;
  grove_state_binding unknown{"weights", describe(w.data(), w_shape, 2, &released)};
  expect_failure(grove_compile(kMlp, R"({"device": "sim"})", &unknown, 1, &model),
                 GROVE_ERROR_INVALID_ARGUMENT, "no param or buffer");
  grove_state_binding wrong{"w", describe(w.data(), wrong_shape, 2, &released)};
  expect_failure(grove_compile(kMlp, R"({"device": "sim"})", &wrong, 1, &model), GROVE_ERROR_SHAPE,
                 "binding 'w'");
  grove_state_binding strided{"w", describe(w.data(), wrong_shape, 2, &released)};
  strided.tensor.strides = transposed;
  expect_failure(grove_compile(kMlp, R"({"device": "sim"})", &strided, 1, &model),
                 GROVE_ERROR_INVALID_ARGUMENT, "contiguous");
  grove_state_binding twice[2] = {{"w", describe(w.data(), w_shape, 2, &released)},
                                  {"w", describe(w.data(), w_shape, 2, &released)}};
  expect_failure(grove_compile(kMlp, R"({"device": "sim"})", twice, 2, &model),
                 GROVE_ERROR_INVALID_ARGUMENT, "bound twice");
  grove_state_binding bad_json{"w", describe(w.data(), w_shape, 2, &released)};
  expect_failure(grove_compile(kMlp, "{", &bad_json, 1, &model), GROVE_ERROR_INVALID_ARGUMENT,
                 "not JSON");
  EXPECT_EQ(released.count, 6) << "every binding handed to a failing compile is released once";

  model = compile_or_fail(R"({"device": "sim"})");
  ASSERT_NE(model, nullptr);
  std::vector<float> x(24, 1.0f);
  grove_tensor* results[2];
  size_t count = 0;
  ReleaseCounter input_released;
  grove_tensor_desc good = describe(x.data(), kShape, 2, &input_released);
  expect_failure(grove_model_run(nullptr, &good, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "model handle is null");
  expect_failure(grove_model_run(model, &good, 1, nullptr, results, 1, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "returns 2 outputs");
  expect_failure(grove_model_run(model, &good, 1, &count, results, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "stream");
  expect_failure(grove_model_run(model, nullptr, 0, nullptr, results, 2, &count), GROVE_ERROR_SHAPE,
                 "takes 1 inputs");
  const int64_t other[2] = {4, 8};
  grove_tensor_desc wrong_input = describe(x.data(), other, 2, &input_released);
  expect_failure(grove_model_run(model, &wrong_input, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_SHAPE, "expects shape");
  grove_tensor_desc bad_dtype = describe(x.data(), kShape, 2, &input_released);
  bad_dtype.dtype = 42;
  expect_failure(grove_model_run(model, &bad_dtype, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "unknown dtype code 42");
  grove_tensor_desc i64 = describe(x.data(), kShape, 2, &input_released);
  i64.dtype = GROVE_I32;
  expect_failure(grove_model_run(model, &i64, 1, nullptr, results, 2, &count), GROVE_ERROR_DTYPE,
                 "expects dtype f32");
  grove_tensor_desc deep = describe(x.data(), kShape, 9, &input_released);
  expect_failure(grove_model_run(model, &deep, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "rank 9");
  grove_tensor_desc no_shape = describe(x.data(), nullptr, 2, &input_released);
  expect_failure(grove_model_run(model, &no_shape, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "shape pointer is null");
  grove_tensor_desc null_data = describe(nullptr, kShape, 2, &input_released);
  expect_failure(grove_model_run(model, &null_data, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_SHAPE, "null");
  grove_tensor_desc on_cpu = describe(x.data(), kShape, 2, &input_released);
  on_cpu.device_type = GROVE_DEVICE_CPU;
  expect_failure(grove_model_run(model, &on_cpu, 1, nullptr, results, 2, &count),
                 GROVE_ERROR_DEVICE, "sim:0");
  EXPECT_EQ(input_released.count, 10) << "every input handed to a failing run is released once";

  ASSERT_EQ(grove_model_run(model, &good, 1, nullptr, results, 2, &count), GROVE_OK);
  std::vector<float> small(3);
  expect_failure(grove_tensor_copy_to_host(results[0], small.data(), 12),
                 GROVE_ERROR_INVALID_ARGUMENT, "needs 48");
  expect_failure(grove_tensor_rank(nullptr, nullptr), GROVE_ERROR_INVALID_ARGUMENT, "null");
  expect_failure(grove_tensor_data(results[0], nullptr), GROVE_ERROR_INVALID_ARGUMENT, "null");
  grove_tensor* state = nullptr;
  expect_failure(grove_model_state(model, "nothing", &state), GROVE_ERROR_INTERNAL, "nothing");
  const char* name = nullptr;
  expect_failure(grove_model_input_name(model, 1, &name), GROVE_ERROR_INVALID_ARGUMENT,
                 "out of range");
  expect_failure(grove_model_stats_json(model, nullptr), GROVE_ERROR_INVALID_ARGUMENT, "null");
  expect_failure(grove_model_mark_step_begin(nullptr), GROVE_ERROR_INVALID_ARGUMENT, "null");
  grove_tensor_destroy(results[0]);
  grove_tensor_destroy(results[1]);
  grove_model_destroy(model);
  grove_model_destroy(nullptr);
  grove_tensor_destroy(nullptr);
  grove_string_free(nullptr);
}

TEST(CApi, TimeRunsCallsTheModelFromCxxAndReleasesInputsOnce) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::vector<float> x(24, 0.25f);
  ReleaseCounter released;
  grove_tensor_desc desc = describe(x.data(), kShape, 2, &released);
  double seconds = -1;
  ASSERT_EQ(grove_model_time_runs(model, &desc, 1, nullptr, 5, &seconds), GROVE_OK)
      << grove_last_error();
  EXPECT_GT(seconds, 0.0);
  EXPECT_EQ(released.count, 1);
  char* stats = nullptr;
  ASSERT_EQ(grove_model_stats_json(model, &stats), GROVE_OK);
  EXPECT_NE(std::string(stats).find("replay"), std::string::npos)
      << "five calls warm up, record and replay: " << stats;
  grove_string_free(stats);
  expect_failure(grove_model_time_runs(model, &desc, 1, nullptr, 0, &seconds),
                 GROVE_ERROR_INVALID_ARGUMENT, "calls must be positive");
  EXPECT_EQ(released.count, 2);
  grove_model_destroy(model);
}

// Note [The launch clock] (runtime/launch_clock.h): replays launch one graph
// per call, inside each call's host time; a warm-up runs no graph launch.
TEST(CApi, TimeRunsSplitTimesTheLaunchesInsideEachCall) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::vector<float> x(24, 0.25f);
  ReleaseCounter released;
  grove_tensor_desc desc = describe(x.data(), kShape, 2, &released);
  double host = -1, launch = -1, wall = -1;
  ASSERT_EQ(grove_model_time_runs_split(model, &desc, 1, nullptr, 1, 0, &host, &launch, &wall),
            GROVE_OK)
      << grove_last_error();
  EXPECT_EQ(launch, 0.0) << "the first call warms up: no graph launch";
  for (int idle : {0, 1}) {
    SCOPED_TRACE(idle);
    desc = describe(x.data(), kShape, 2, &released);
    ASSERT_EQ(grove_model_time_runs_split(model, &desc, 1, nullptr, 6, idle, &host, &launch, &wall),
              GROVE_OK)
        << grove_last_error();
    EXPECT_GT(launch, 0.0) << "recorded by the second call, replayed after";
    EXPECT_GE(host, launch);
    EXPECT_GE(wall, host);
  }
  EXPECT_EQ(released.count, 3);
  expect_failure(
      grove_model_time_runs_split(model, &desc, 1, nullptr, 1, 0, &host, &launch, nullptr),
      GROVE_ERROR_INVALID_ARGUMENT, "null");
  EXPECT_EQ(released.count, 4);
  grove_model_destroy(model);
}

// y = reshape(x): the output is a view of the input.
const char* kView = R"({
  "name": "view", "inputs": [{"name": "x", "shape": [3, 8], "dtype": "f32"}],
  "nodes": [{"name": "y", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [24]}},
            {"name": "z", "op": "exp", "inputs": ["x"]}],
  "outputs": ["y", "z"]
})";

TEST(CApi, OutputViewingABorrowedInputGetsACopy) {
  for (const char* backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    grove_model* model = nullptr;
    std::string options = std::string(R"({"device": "sim", "backend": ")") + backend + "\"}";
    ASSERT_EQ(grove_compile(kView, options.c_str(), nullptr, 0, &model), GROVE_OK)
        << grove_last_error();
    std::mt19937 rng(17);
    for (int call = 0; call < 4; ++call) {
      auto x = std::make_unique<std::vector<float>>(random_values(rng, 24));
      std::vector<float> expected = *x;
      grove_tensor_desc desc = describe(x->data(), kShape, 2);  // borrowed: no release
      void* managed[2] = {nullptr, nullptr};
      size_t count = 0;
      ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, managed, 2, &count), GROVE_OK)
          << grove_last_error();
      ASSERT_EQ(count, 2u);
      auto* y = static_cast<DLManagedTensor*>(managed[0]);
      EXPECT_NE(y->dl_tensor.data, x->data()) << "the view was moved to grove's copy";
      std::fill(x->begin(), x->end(), -1.0f);
      x.reset();  // the caller frees its input; the output must not notice
      std::vector<float> read(24);
      std::memcpy(read.data(), y->dl_tensor.data, sizeof(float) * 24);
      EXPECT_EQ(read, expected);
      EXPECT_EQ(grove_dlpack_check(managed[0]), GROVE_OK);
      for (void* tensor : managed) {
        auto* dl = static_cast<DLManagedTensor*>(tensor);
        dl->deleter(dl);
      }
    }
    int64_t copies = 0;
    ASSERT_EQ(grove_model_borrowed_copies(model, &copies), GROVE_OK);
    EXPECT_GE(copies, 1);
    grove_model_destroy(model);
  }
}

TEST(CApi, BorrowedInputsAreNotCopiedWhenNothingViewsThem) {
  for (const char* backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    std::string options = std::string(R"({"device": "sim", "backend": ")") + backend + "\"}";
    grove_model* model = compile_or_fail(options.c_str());
    ASSERT_NE(model, nullptr);
    std::mt19937 rng(23);
    void* kept[2] = {nullptr, nullptr};
    for (int call = 0; call < 5; ++call) {
      std::vector<float> x = random_values(rng, 24);
      grove_tensor_desc desc = describe(x.data(), kShape, 2);
      void* managed[2] = {nullptr, nullptr};
      size_t count = 0;
      ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, managed, 2, &count), GROVE_OK)
          << grove_last_error();
      for (void* tensor : kept) {
        if (tensor == nullptr) continue;
        auto* dl = static_cast<DLManagedTensor*>(tensor);
        dl->deleter(dl);
      }
      kept[0] = managed[0];
      kept[1] = managed[1];
    }
    int64_t copies = -1;
    ASSERT_EQ(grove_model_borrowed_copies(model, &copies), GROVE_OK);
    EXPECT_EQ(copies, 0) << "no output views the input, so nothing is copied";
    int32_t dtype = -1;
    ASSERT_EQ(grove_model_output_dtype(model, 1, &dtype), GROVE_OK);
    EXPECT_EQ(dtype, GROVE_F32);
    expect_failure(grove_model_output_dtype(model, 2, &dtype), GROVE_ERROR_INVALID_ARGUMENT,
                   "out of range");
    for (void* tensor : kept) {
      auto* dl = static_cast<DLManagedTensor*>(tensor);
      dl->deleter(dl);
    }
    grove_model_destroy(model);
  }
}

TEST(CApi, DlpackCheckReportsAnOverwrittenReplayOutput) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::vector<float> x(24, 0.5f);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  void* managed[2];
  size_t count = 0;
  for (int call = 0; call < 3; ++call) {  // warm-up, record, replay
    ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, managed, 2, &count), GROVE_OK);
    if (call < 2) {
      for (void* tensor : managed)
        static_cast<DLManagedTensor*>(tensor)->deleter(static_cast<DLManagedTensor*>(tensor));
    }
  }
  void* kept[2] = {managed[0], managed[1]};
  EXPECT_EQ(grove_dlpack_check(kept[0]), GROVE_OK);
  ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, managed, 2, &count), GROVE_OK);
  expect_failure(grove_dlpack_check(kept[0]), GROVE_ERROR_STALE, "overwrote");
  DLManagedTensor foreign{};
  expect_failure(grove_dlpack_check(&foreign), GROVE_ERROR_INVALID_ARGUMENT, "not made by grove");
  for (void* tensor : {kept[0], kept[1], managed[0], managed[1]}) {
    static_cast<DLManagedTensor*>(tensor)->deleter(static_cast<DLManagedTensor*>(tensor));
  }
  grove_model_destroy(model);
}

// Note [Stale hand-outs as inputs] (capi/handed_out_storages.h): an output the
// caller kept past its generation's end and passes back in is refused as the
// output it was, naming the input and saying it is no longer valid. (The
// tree's own check refuses an input in pool memory that no live output owns,
// but lets one through where a live output of the new generation owns the
// address, as in Wav2Vec2-Conformer's training through the door on a GPU
// host; the hand-out check does not depend on who owns the memory now.)
TEST(CApi, AStaleHandOutPassedBackInIsRefused) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::vector<float> x(24, 0.5f);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  void* kept[2];
  size_t count = 0;
  ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, kept, 2, &count), GROVE_OK);
  ASSERT_EQ(grove_model_mark_step_begin(model), GROVE_OK);  // its blocks are reclaimed
  void* live[2];
  ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, live, 2, &count), GROVE_OK);
  auto* a = static_cast<DLManagedTensor*>(kept[1]);  // 'a', [3, 16]: x is its first 24 values
  grove_tensor_desc again = describe(static_cast<float*>(a->dl_tensor.data), kShape, 2);
  void* refused[2];
  expect_failure(grove_model_run_dlpack(model, &again, 1, nullptr, refused, 2, &count),
                 GROVE_ERROR_STALE, "input 0");
  expect_failure(grove_model_run_dlpack(model, &again, 1, nullptr, refused, 2, &count),
                 GROVE_ERROR_STALE, "no longer valid");
  void* fresh[2];
  ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, nullptr, fresh, 2, &count), GROVE_OK)
      << "the model stays usable: " << grove_last_error();
  for (void* tensor : {kept[0], kept[1], live[0], live[1], fresh[0], fresh[1]})
    static_cast<DLManagedTensor*>(tensor)->deleter(static_cast<DLManagedTensor*>(tensor));
  grove_model_destroy(model);
}

// Note [One C call per door call]: grove_model_run_dlpack_invocation runs the
// model inside the invocation of its key. Two models called under one key
// share a generation, so the first one's output stays readable after the
// second call; under two keys the second call ends the first one's step.
// No invocation stays open after a call, also one that fails.
TEST(CApi, RunDlpackInvocationSharesTheGenerationOfItsKey) {
  const char* options = R"({"device": "sim", "backend": "cudagraphs"})";
  grove_model* first = compile_or_fail(options);
  grove_model* second = compile_or_fail(options);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::mt19937 rng(29);
  auto release = [](void* const* tensors) {
    for (int i = 0; i < 2; ++i) {
      auto* dl = static_cast<DLManagedTensor*>(tensors[i]);
      dl->deleter(dl);
    }
  };
  for (uint64_t key = 10; key < 18; ++key) {
    const bool shared = key < 16;  // the last two rounds: two keys per round
    SCOPED_TRACE(key);
    std::vector<float> x = random_values(rng, 24);
    grove_tensor_desc desc = describe(x.data(), kShape, 2);
    void* a[2] = {nullptr, nullptr};
    void* b[2] = {nullptr, nullptr};
    size_t count = 0;
    ASSERT_EQ(grove_model_run_dlpack_invocation(first, key, &desc, 1, nullptr, a, 2, &count),
              GROVE_OK)
        << grove_last_error();
    ASSERT_EQ(count, 2u);
    const uint64_t second_key = shared ? key : key + 1000;
    ASSERT_EQ(
        grove_model_run_dlpack_invocation(second, second_key, &desc, 1, nullptr, b, 2, &count),
        GROVE_OK)
        << grove_last_error();
    if (key >= 13) {  // both models replay by now
      EXPECT_EQ(grove_dlpack_check(a[1]) == GROVE_OK, shared) << grove_last_error();
    }
    expect_failure(grove_invocation_end(), GROVE_ERROR_INTERNAL, "not begun");
    release(a);
    release(b);
  }
  std::vector<float> x = random_values(rng, 24);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  void* managed[2] = {nullptr, nullptr};
  size_t count = 0;
  expect_failure(grove_model_run_dlpack_invocation(first, uint64_t{1} << 63, &desc, 1, nullptr,
                                                   managed, 2, &count),
                 GROVE_ERROR_INTERNAL, "2^63");
  EXPECT_EQ(count, 0u);
  expect_failure(grove_invocation_end(), GROVE_ERROR_INTERNAL, "not begun");
  grove_model_destroy(first);
  grove_model_destroy(second);
}

// A training step through the C API: the forward compiled as the tree's
// forward stage keeps its outputs (the saved activations) valid until its
// backward stage has run, and the next step's forward replay overwrites them.
TEST(CApi, ForwardStageOutputsLiveUntilTheBackwardStageAndTheNextStep) {
  const char* backward_program = R"({
    "name": "capi_backward",
    "inputs": [{"name": "a", "shape": [3, 16], "dtype": "f32"}],
    "nodes": [{"name": "two", "op": "full", "inputs": [], "attrs": {"value": 2.0, "shape": [], "dtype": "f32"}},
              {"name": "g", "op": "mul", "inputs": ["a", "two"]}],
    "outputs": ["g"]
  })";
  grove_model* forward =
      compile_or_fail(R"({"device": "sim", "backend": "cudagraphs", "stage": "forward"})");
  grove_model* backward = nullptr;
  ASSERT_EQ(grove_compile(backward_program,
                          R"({"device": "sim", "backend": "cudagraphs", "stage": "backward"})",
                          nullptr, 0, &backward),
            GROVE_OK)
      << grove_last_error();
  ASSERT_NE(forward, nullptr);
  std::mt19937 rng(29);
  grove_tensor* previous_saved = nullptr;
  for (int step = 0; step < 4; ++step) {  // warm-up, record, then replays
    SCOPED_TRACE("seed 29, step " + std::to_string(step));
    std::vector<float> x = random_values(rng, 24);
    grove_tensor_desc desc = describe(x.data(), kShape, 2);
    grove_tensor* outputs[2] = {nullptr, nullptr};
    size_t count = 0;
    ASSERT_EQ(grove_model_run(forward, &desc, 1, nullptr, outputs, 2, &count), GROVE_OK)
        << grove_last_error();
    int32_t valid = -1;
    if (previous_saved != nullptr && step >= 3) {
      ASSERT_EQ(grove_tensor_is_valid(previous_saved, &valid), GROVE_OK);
      EXPECT_EQ(valid, 0) << "the next step's forward replay overwrote the saved activation";
    }
    if (previous_saved != nullptr) grove_tensor_destroy(previous_saved);
    grove_tensor* saved = outputs[1];
    void* data = nullptr;
    ASSERT_EQ(grove_tensor_data(saved, &data), GROVE_OK) << grove_last_error();
    const int64_t saved_shape[2] = {3, 16};
    grove_tensor_desc saved_desc = describe(static_cast<float*>(data), saved_shape, 2);
    grove_tensor* gradient = nullptr;
    ASSERT_EQ(grove_model_run(backward, &saved_desc, 1, nullptr, &gradient, 1, &count), GROVE_OK)
        << grove_last_error();
    ASSERT_EQ(grove_tensor_is_valid(saved, &valid), GROVE_OK);
    EXPECT_EQ(valid, 1) << "the backward of the same step must not overwrite the forward's outputs";
    std::vector<float> activation = host_values(saved);
    std::vector<float> doubled = host_values(gradient);
    ASSERT_EQ(doubled.size(), activation.size());
    for (size_t i = 0; i < activation.size(); ++i) EXPECT_EQ(doubled[i], 2.0f * activation[i]);
    grove_tensor_destroy(gradient);
    grove_tensor_destroy(outputs[0]);
    previous_saved = saved;
  }
  grove_tensor_destroy(previous_saved);
  grove_model* model = nullptr;
  expect_failure(
      grove_compile(kMlp, R"({"device": "sim", "stage": "backwards"})", nullptr, 0, &model),
      GROVE_ERROR_INVALID_ARGUMENT, "option 'stage' is 'backwards'");
  grove_model_destroy(backward);
  grove_model_destroy(forward);
}

// Note [Saved values kept in grove] (capi/kept_values.cc): the forward keeps
// its saved activation behind a token, the backward reads it through the
// token inside grove; a later step's replay makes it stale; a freed token is
// no longer accepted.
TEST(CApi, KeptValuesReachTheBackwardThroughAToken) {
  const char* backward_program = R"({
    "name": "capi_kept_backward",
    "inputs": [{"name": "a", "shape": [3, 16], "dtype": "f32"},
               {"name": "s", "shape": [], "dtype": "f32"}],
    "nodes": [{"name": "g", "op": "mul", "inputs": ["a", "s"]}],
    "outputs": ["g"]
  })";
  grove_model* forward =
      compile_or_fail(R"({"device": "sim", "backend": "cudagraphs", "stage": "forward"})");
  grove_model* backward = nullptr;
  ASSERT_EQ(grove_compile(backward_program,
                          R"({"device": "sim", "backend": "cudagraphs", "stage": "backward"})",
                          nullptr, 0, &backward),
            GROVE_OK)
      << grove_last_error();
  ASSERT_NE(forward, nullptr);
  std::mt19937 rng(31);
  const int64_t handed[1] = {0};
  const int64_t kept[1] = {1};
  const int64_t sources[2] = {0, -1};
  float scale = 3.0f;
  grove_tensor_desc scale_desc = describe(&scale, nullptr, 0);
  DLManagedTensor* previous = nullptr;
  for (int step = 0; step < 4; ++step) {  // warm-up, record, then replays
    SCOPED_TRACE("seed 31, step " + std::to_string(step));
    std::vector<float> x = random_values(rng, 24);
    grove_tensor_desc desc = describe(x.data(), kShape, 2);
    void* output = nullptr;
    void* token = nullptr;
    ASSERT_EQ(grove_model_run_keeping(forward, &desc, 1, nullptr, handed, 1, &output, kept, 1,
                                      700 + step, &token),
              GROVE_OK)
        << grove_last_error();
    auto* token_tensor = static_cast<DLManagedTensor*>(token);
    ASSERT_EQ(token_tensor->dl_tensor.ndim, 1);
    EXPECT_EQ(*static_cast<int64_t*>(token_tensor->dl_tensor.data), 700 + step);
    const void* token_data = token_tensor->dl_tensor.data;
    if (previous != nullptr && step >= 3) {
      int64_t first_stale = -2;
      ASSERT_EQ(grove_kept_check(previous->dl_tensor.data, &first_stale), GROVE_OK);
      EXPECT_EQ(first_stale, 0) << "the next step's forward replay overwrote the kept value";
      void* gradient = nullptr;
      size_t count = 0;
      expect_failure(grove_model_run_with_kept(backward, previous->dl_tensor.data, sources, 2,
                                               &scale_desc, 1, nullptr, &gradient, 1, &count),
                     GROVE_ERROR_STALE, "kept value 0");
    }
    if (previous != nullptr) previous->deleter(previous);
    void* gradient = nullptr;
    size_t count = 0;
    ASSERT_EQ(grove_model_run_with_kept(backward, token_data, sources, 2, &scale_desc, 1, nullptr,
                                        &gradient, 1, &count),
              GROVE_OK)
        << grove_last_error();
    ASSERT_EQ(count, 1u);
    void* activation = nullptr;
    ASSERT_EQ(grove_kept_value(token_data, 0, &activation), GROVE_OK) << grove_last_error();
    const auto* values =
        static_cast<const float*>(static_cast<DLManagedTensor*>(activation)->dl_tensor.data);
    const auto* scaled =
        static_cast<const float*>(static_cast<DLManagedTensor*>(gradient)->dl_tensor.data);
    for (size_t i = 0; i < 48; ++i) EXPECT_EQ(scaled[i], 3.0f * values[i]);
    expect_failure(grove_kept_value(token_data, 1, &activation), GROVE_ERROR_INVALID_ARGUMENT,
                   "out of range");
    for (void* tensor : {output, gradient, activation}) {
      static_cast<DLManagedTensor*>(tensor)->deleter(static_cast<DLManagedTensor*>(tensor));
    }
    previous = token_tensor;
  }
  const void* freed = previous->dl_tensor.data;
  previous->deleter(previous);
  int64_t first_stale = 0;
  expect_failure(grove_kept_check(freed, &first_stale), GROVE_ERROR_INVALID_ARGUMENT,
                 "not a live kept set");
  const int64_t out_of_range[1] = {5};
  void* output = nullptr;
  void* token = nullptr;
  std::vector<float> x(24, 0.25f);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  expect_failure(grove_model_run_keeping(forward, &desc, 1, nullptr, handed, 1, &output,
                                         out_of_range, 1, 0, &token),
                 GROVE_ERROR_INVALID_ARGUMENT, "output index 5 is out of range");
  grove_model_destroy(backward);
  grove_model_destroy(forward);
}

// On cuda: inputs in device memory the caller owns (made here through grove's
// runtime, as PyTorch would make them), on the caller's own stream and on the
// legacy default stream (NULL, PyTorch's default stream; Note [Calls from the
// legacy default stream] in capi/grove.cc), where GEMMs used to be refused.
TEST(CApiCuda, RunsOnCallerDeviceMemoryAndTheCallersStreamLikeSim) {
  using namespace grove;
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  runtime::StreamHandle own = runtime::device_context(runtime::kCudaDevice).create_stream();
  for (auto [backend, stream] : {std::pair{"eager", own}, std::pair{"cudagraphs", own},
                                 std::pair{"eager", runtime::StreamHandle{}},
                                 std::pair{"cudagraphs", runtime::StreamHandle{}}}) {
    SCOPED_TRACE(std::string(backend) +
                 (stream.is_default() ? " on the legacy default stream" : ""));
    std::string options = std::string(R"({"device": "cuda:0", "backend": ")") + backend + "\"}";
    grove_model* model = compile_or_fail(options.c_str());
    ASSERT_NE(model, nullptr);
    compiler::backends::CompiledModel reference = compiler::backends::compile(
        compiler::model_format::load_model(kMlp, {}, runtime::kSimDevice), {.backend = "eager"});
    std::mt19937 rng(31);
    for (int call = 0; call < 4; ++call) {
      std::vector<float> host = random_values(rng, 24);
      runtime::Tensor x = runtime::Tensor::from_vector(host, {3, 8}, runtime::kCudaDevice);
      grove_tensor_desc desc = describe(static_cast<float*>(x.data_ptr()), kShape, 2);
      desc.device_type = GROVE_DEVICE_CUDA;
      void* managed[2];
      size_t count = 0;
      ASSERT_EQ(grove_model_run_dlpack(model, &desc, 1, stream.impl, managed, 2, &count), GROVE_OK)
          << grove_last_error();
      auto* y = static_cast<DLManagedTensor*>(managed[0]);
      EXPECT_EQ(y->dl_tensor.device.device_type, kDLCUDA);
      std::vector<float> expected =
          reference({runtime::Tensor::from_vector(host, {3, 8}, runtime::kSimDevice)})[0]
              .to_vector<float>();
      runtime::device_context(runtime::kCudaDevice).platform().synchronize_stream(stream);
      std::vector<float> actual(12);
      runtime::DeviceContext& context = runtime::device_context(runtime::kCudaDevice);
      context.platform().copy_async(actual.data(), y->dl_tensor.data, sizeof(float) * 12,
                                    runtime::CopyKind::kDeviceToHost, stream);
      context.platform().synchronize_stream(stream);
      for (size_t i = 0; i < actual.size(); ++i) {
        EXPECT_NEAR(actual[i], expected[i], 1e-4f + 1e-4f * std::abs(expected[i])) << i;
      }
      for (void* tensor : managed) {
        static_cast<DLManagedTensor*>(tensor)->deleter(static_cast<DLManagedTensor*>(tensor));
      }
    }
    grove_model_destroy(model);
  }
}

TEST(CApi, LastErrorIsPerThreadAndKeptUntilTheNextFailure) {
  grove_model* model = nullptr;
  ASSERT_NE(grove_compile(nullptr, nullptr, nullptr, 0, &model), GROVE_OK);
  std::string mine = grove_last_error();
  std::string theirs;
  std::thread other([&theirs] { theirs = grove_last_error(); });
  other.join();
  EXPECT_EQ(theirs, "");
  size_t count = 0;
  model = compile_or_fail(R"({"device": "sim"})");
  ASSERT_EQ(grove_model_input_count(model, &count), GROVE_OK);
  EXPECT_EQ(std::string(grove_last_error()), mine) << "a successful call keeps the last message";
  grove_model_destroy(model);
}

// Note [Outputs over cached storage] (capi/handout.cc): grove_model_run_handout
// names each output by a key that stays the same while a replay writes the
// same memory with the same layout, and differs between outputs; the
// references it is handed are released before the run, so a replay whose
// previous outputs were released does not retire them, while one kept
// (not released) is reported overwritten. An unowned view describes the
// same memory and holds no reference.
TEST(CApi, HandoutKeysNameOutputsExactly) {
  grove_model* model = compile_or_fail(R"({"device": "sim", "backend": "cudagraphs"})");
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(41);
  void* previous[2] = {nullptr, nullptr};
  size_t previous_count = 0;
  uint64_t first_keys[2] = {0, 0};
  for (int call = 0; call < 6; ++call) {
    SCOPED_TRACE("seed 41, call " + std::to_string(call));
    std::vector<float> x = random_values(rng, 24);
    grove_tensor_desc desc = describe(x.data(), kShape, 2);
    void* managed[2] = {nullptr, nullptr};
    uint64_t keys[2] = {0, 0};
    size_t count = 0;
    const uint64_t invocation = call % 2 == 0 ? GROVE_NO_INVOCATION : uint64_t{500 + call};
    ASSERT_EQ(grove_model_run_handout(model, invocation, previous, previous_count, &desc, 1,
                                      nullptr, managed, keys, 2, &count),
              GROVE_OK)
        << grove_last_error();
    ASSERT_EQ(count, 2u);
    EXPECT_NE(keys[0], keys[1]);
    EXPECT_EQ(grove_dlpack_check(managed[0]), GROVE_OK) << grove_last_error();
    if (call >= 3) {  // replays after the recording: same memory, same layout
      EXPECT_EQ(keys[0], first_keys[0]);
      EXPECT_EQ(keys[1], first_keys[1]);
    }
    first_keys[0] = keys[0];
    first_keys[1] = keys[1];
    void* unowned = nullptr;
    ASSERT_EQ(grove_dlpack_unowned(managed[0], &unowned), GROVE_OK) << grove_last_error();
    const DLTensor& view = static_cast<DLManagedTensor*>(unowned)->dl_tensor;
    const DLTensor& owned = static_cast<DLManagedTensor*>(managed[0])->dl_tensor;
    EXPECT_EQ(view.data, owned.data);
    ASSERT_EQ(view.ndim, owned.ndim);
    for (int d = 0; d < view.ndim; ++d) {
      EXPECT_EQ(view.shape[d], owned.shape[d]);
      EXPECT_EQ(view.strides[d], owned.strides[d]);
    }
    EXPECT_EQ(view.dtype.bits, owned.dtype.bits);
    expect_failure(grove_dlpack_check(unowned), GROVE_ERROR_INVALID_ARGUMENT, "not made by grove");
    static_cast<DLManagedTensor*>(unowned)->deleter(static_cast<DLManagedTensor*>(unowned));
    previous[0] = managed[0];
    previous[1] = managed[1];
    previous_count = 2;
  }
  // Output 0 kept (not released): the next replay retires it.
  void* kept = previous[0];
  void* managed[2] = {nullptr, nullptr};
  uint64_t keys[2] = {0, 0};
  size_t count = 0;
  std::vector<float> x = random_values(rng, 24);
  grove_tensor_desc desc = describe(x.data(), kShape, 2);
  ASSERT_EQ(grove_model_run_handout(model, GROVE_NO_INVOCATION, &previous[1], 1, &desc, 1, nullptr,
                                    managed, keys, 2, &count),
            GROVE_OK)
      << grove_last_error();
  expect_failure(grove_dlpack_check(kept), GROVE_ERROR_STALE, "overwrote");
  DLManagedTensor foreign{};
  void* bad[2] = {kept, &foreign};
  ReleaseCounter released;
  grove_tensor_desc counted = describe(x.data(), kShape, 2, &released);
  void* refused[2] = {nullptr, nullptr};
  expect_failure(grove_model_run_handout(model, GROVE_NO_INVOCATION, bad, 2, &counted, 1, nullptr,
                                         refused, keys, 2, &count),
                 GROVE_ERROR_INVALID_ARGUMENT, "not made by grove");
  EXPECT_EQ(released.count, 1) << "a refused call still releases its input once";
  EXPECT_EQ(grove_dlpack_check(kept), GROVE_ERROR_STALE) << "nothing was released";
  void* rest[3] = {kept, managed[0], managed[1]};
  ASSERT_EQ(grove_dlpack_release(rest, 3), GROVE_OK) << grove_last_error();
  grove_model_destroy(model);
}

}  // namespace
