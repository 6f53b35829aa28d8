// Bad input gets a specific grove::Error subclass with a message that names
// the problem, never a crash: wrong input count, shape, dtype and device;
// non-contiguous inputs; stale tensors passed back in; malformed and hostile
// JSON models; out-of-range configuration (struct and GROVE_CUDAGRAPHS_*).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/config.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"

namespace grove::reliability {
namespace {

using compiler::TensorList;
using compiler::backends::compile;
using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::Tensor;

using testing::expect_error;
using testing::ScopedEnv;

compiler::ir::Program small_program(runtime::Device device) {
  ProgramBuilder b("small", device);
  ValueId x = b.input("x", {3, 4});
  ValueId w = b.param("w", {4, 4}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  b.output(b.tanh(b.matmul(x, w)));
  return b.build();
}

class BadCallInput : public testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    cudagraph_trees::backend::register_cudagraphs_backend();
    cudagraph_trees::reset_tree_managers();
  }
  void TearDown() override { cudagraph_trees::reset_tree_managers(); }
};

TEST_P(BadCallInput, WrongCountShapeDtypeAndDeviceNameTheInputOnEveryBackend) {
  GROVE_SEEDED_RNG(rng);
  for (const std::string backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    CompiledModel model = compile(small_program(device()), {.backend = backend});
    Tensor good = testing::random_tensor(rng, {3, 4}, device());
    expect_error<ShapeError>([&] { model({good, good}); }, {"small", "takes 1 inputs", "found 2"});
    expect_error<ShapeError>([&] { model(TensorList{}); }, {"small", "found 0"});
    expect_error<ShapeError>(
        [&] {
          model({testing::random_tensor(rng, {4, 3}, device())});
        },
        {"'x'", "expects shape [3, 4]", "found [4, 3]"});
    expect_error<DTypeError>(
        [&] {
          model({Tensor::from_vector(std::vector<int64_t>(12, 1), {3, 4}, device())});
        },
        {"'x'", "expects dtype f32", "found i64"});
    expect_error<DeviceError>(
        [&] {
          model({testing::random_tensor(rng, {3, 4}, runtime::kCpuDevice)});
        },
        {"'x'", "expects a tensor on", "found one on cpu"});
    // Still usable after every rejected call.
    EXPECT_EQ(model({good})[0].shape(), (runtime::Shape{3, 4}));
  }
}

// Note [Strided inputs] (compiler/lowering/lower.h).
TEST_P(BadCallInput, NonContiguousAndExpandedInputsGiveTheResultsOfTheirContiguousCopies) {
  GROVE_SEEDED_RNG(rng);
  for (const std::string backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    CompiledModel model = compile(small_program(device()), {.backend = backend});
    for (int call = 0; call < 4; ++call) {
      Tensor wide = testing::random_tensor(rng, {4, 3}, device());
      Tensor row = testing::random_tensor(rng, {1, 4}, device());
      for (Tensor strided : {wide.transpose(0, 1), row.expand({3, 4})}) {
        ASSERT_FALSE(strided.is_contiguous());
        Tensor copy = Tensor::from_vector(strided.to_vector<float>(), {3, 4}, device());
        std::vector<float> expected = model({copy})[0].to_vector<float>();
        std::vector<float> got = model({strided})[0].to_vector<float>();
        EXPECT_EQ(got, expected) << "call " << call << " strides "
                                 << runtime::shape_str(strided.strides());
      }
    }
  }
}

TEST_P(BadCallInput, StaleOutputPassedBackInThrowsStaleTensorErrorSayingWhatToDo) {
  GROVE_SEEDED_RNG(rng);
  ProgramBuilder b("square", device());
  ValueId x = b.input("x", {8});
  b.output(b.mul(x, x));
  CompiledModel model = compile(b.build(), {.backend = "cudagraphs"});
  TensorList first = model({testing::random_tensor(rng, {8}, device())});  // a warm-up output
  model({testing::random_tensor(rng, {8}, device())});                     // a new generation
  ASSERT_TRUE(first[0].storage()->is_poisoned());
  expect_error<StaleTensorError>([&] { model({first[0]}); }, {"mark_step_begin"});
  expect_error<StaleTensorError>([&] { (void)first[0].to_vector<float>(); }, {"clone"});
  // The manager is intact and the model still correct.
  cudagraph_trees::tree_manager_for(device()).verify();
  Tensor fresh = testing::random_tensor(rng, {8}, device());
  std::vector<float> values = fresh.to_vector<float>();
  std::vector<float> got = model({fresh})[0].to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i] * values[i]);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(BadCallInput);

// A minimal valid model with `nodes` spliced in.
std::string model_text(const std::string& nodes, const std::string& outputs = "[\"y\"]") {
  return R"({"name": "m", "inputs": [{"name": "x", "shape": [2, 3], "dtype": "f32"}],
             "nodes": )" +
         nodes + R"(, "outputs": )" + outputs + "}";
}

TEST(BadModelJson, MalformedTextIsAModelFormatError) {
  expect_error<ModelFormatError>([] { compiler::model_format::load_model("{\"name\": \"m\", "); },
                                 {"JSON"});
  expect_error<ModelFormatError>([] { compiler::model_format::load_model("[1, 2, 3]"); }, {});
  expect_error<ModelFormatError>([] { compiler::model_format::load_model(""); }, {});
  expect_error<ModelFormatError>([] { compiler::model_format::load_model("\x01\xff\xfe"); }, {});
}

TEST(BadModelJson, DeepNestingIsRejectedBeforeItExhaustsTheStack) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(deep); },
                                 {"deeper than"});
  std::string attrs = model_text(R"([{"name": "y", "op": "tanh", "inputs": ["x"], "attrs": )" +
                                 std::string(40, '[') + std::string(40, ']') + "}]");
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(attrs); },
                                 {"deeper than"});
}

TEST(BadModelJson, HugeAndNegativeShapesNameTheInput) {
  std::string huge = R"({"name": "m", "inputs": [{"name": "x", "shape": [4611686018427387904, 8],
                          "dtype": "f32"}], "nodes": [], "outputs": ["x"]})";
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(huge); }, {"x"});
  std::string product = R"({"name": "m", "inputs": [{"name": "x", "shape": [65536, 65536, 65536],
                             "dtype": "f32"}], "nodes": [], "outputs": ["x"]})";
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(product); },
                                 {"x", "elements"});
  std::string negative = R"({"name": "m", "inputs": [{"name": "x", "shape": [-3, 2],
                              "dtype": "f32"}], "nodes": [], "outputs": ["x"]})";
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(negative); }, {"x"});
  std::string weird = R"({"name": "m", "inputs": [{"name": "x", "shape": [2.5, "nope", null],
                           "dtype": "f32"}], "nodes": [], "outputs": ["x"]})";
  expect_error<ModelFormatError>([&] { compiler::model_format::load_model(weird); }, {"x"});
}

// Note [Dimension products].
TEST(ModelJsonDims, ProductsOfDimensionsAndIntegers) {
  auto text = [](const std::string& shape) {
    return R"({"name": "m", "dims": {"batch": 3, "seq": 5},
               "inputs": [{"name": "x", "shape": )" +
           shape + R"(, "dtype": "f32"}],
               "nodes": [{"name": "y", "op": "reshape", "inputs": ["x"],
                          "attrs": {"shape": ["batch*seq", 4]}}], "outputs": ["y"]})";
  };
  compiler::ir::Program program =
      compiler::model_format::load_model(text(R"(["batch", "seq", 4])"));
  EXPECT_EQ(program.dims().at("batch"), 3);
  program = compiler::model_format::load_model(text(R"(["batch", "seq*2*2"])"));
  expect_error<ModelFormatError>(
      [&] { compiler::model_format::load_model(text(R"(["batch", "seq*nope", 4])")); },
      {"nope", "does not declare"});
  expect_error<ModelFormatError>(
      [&] { compiler::model_format::load_model(text(R"(["batch*0", "seq", 4])")); },
      {"batch*0", "factor below 1"});
  expect_error<ModelFormatError>(
      [&] { compiler::model_format::load_model(text(R"(["batch*99999999999", 65536, 4])")); },
      {"largest size"});
}

TEST(BadModelJson, UnknownOpsFieldsAndNamesNameTheNode) {
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(
            model_text(R"([{"name": "y", "op": "frobnicate", "inputs": ["x"]}])"));
      },
      {"y", "frobnicate"});
  expect_error<ModelFormatError>(
      [] { compiler::model_format::load_model(model_text(R"([{"name": "y", "inputs": ["x"]}])")); },
      {"y", "op"});
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(
            model_text(R"([{"name": "y", "op": "tanh", "inputs": ["nowhere"]}])"));
      },
      {"y", "nowhere"});
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(
            model_text(R"([{"name": "y", "op": "tanh", "inputs": "x"}])"));
      },
      {"y", "inputs"});
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(
            model_text(R"([{"name": "y", "op": "tanh", "inputs": ["x"]}])", R"(["absent"])"));
      },
      {"absent"});
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(model_text(
            R"([{"name": "y", "op": "tanh", "inputs": ["x"]}, {"name": "y", "op": "exp", "inputs": ["x"]}])"));
      },
      {"y"});
}

TEST(BadModelJson, CyclesAreUseBeforeDefinition) {
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(model_text(
            R"([{"name": "a", "op": "add", "inputs": ["x", "y"]}, {"name": "y", "op": "tanh", "inputs": ["a"]}])"));
      },
      {"a", "y"});
  expect_error<ModelFormatError>(
      [] {
        compiler::model_format::load_model(
            model_text(R"([{"name": "y", "op": "tanh", "inputs": ["y"]}])"));
      },
      {"y"});
}

TEST(BadModelJson, TypeErrorsInsideAValidDocumentNameTheNode) {
  // A matmul of [2, 3] by [2, 3]: a typing error, reported as the node's.
  try {
    compiler::model_format::load_model(
        model_text(R"([{"name": "y", "op": "matmul", "inputs": ["x", "x"]}])"));
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("y"), std::string::npos) << error.what();
  }
}

TEST(BadConfig, OutOfRangeFieldsAreConfigErrorsNamingTheField) {
  cudagraph_trees::TreeConfig config;
  config.rerecord_limit = -1;
  expect_error<ConfigError>([&] { config.validate(); }, {"rerecord_limit"});
  config = {};
  config.managed_input_move_limit = 0;
  expect_error<ConfigError>([&] { config.validate(); }, {"managed_input_move_limit"});
  config = {};
  config.shape_warn_limit = 0;
  expect_error<ConfigError>([&] { config.validate(); }, {"shape_warn_limit"});
  config = {};
  config.min_segment_kernels = -5;
  expect_error<ConfigError>([&] { config.validate(); }, {"min_segment_kernels"});
  config = {};
  config.batch_buckets = {4, 0};
  expect_error<ConfigError>([&] { config.validate(); }, {"batch_buckets"});
  config = {};
  config.rerecord_limit = -1;
  expect_error<ConfigError>(
      [&] { cudagraph_trees::TreeManager manager(runtime::kSimDevice, config); },
      {"rerecord_limit"});
}

TEST(BadConfig, MalformedEnvironmentVariablesAreConfigErrorsNamingTheVariable) {
  struct Case {
    const char* variable;
    const char* value;
  };
  for (const Case& c :
       std::vector<Case>{{"GROVE_CUDAGRAPHS_STRICT", "maybe"},
                         {"GROVE_CUDAGRAPHS_RERECORD_LIMIT", "-1"},
                         {"GROVE_CUDAGRAPHS_RERECORD_LIMIT", "12abc"},
                         {"GROVE_CUDAGRAPHS_RERECORD_LIMIT", "99999999999999999999"},
                         {"GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT", "0"},
                         {"GROVE_CUDAGRAPHS_SHAPE_WARN_LIMIT", "x"},
                         {"GROVE_CUDAGRAPHS_MUTATION_POLICY", "sometimes"},
                         {"GROVE_CUDAGRAPHS_ZERO_COPY", "2"},
                         {"GROVE_CUDAGRAPHS_MIN_SEGMENT_KERNELS", "-3"},
                         {"GROVE_CUDAGRAPHS_BATCH_BUCKETS", "1,,4"},
                         {"GROVE_CUDAGRAPHS_BATCH_BUCKETS", "1,-2"},
                         {"GROVE_CUDAGRAPHS_BATCH_BUCKETS", "8,4,abc"}}) {
    SCOPED_TRACE(std::string(c.variable) + "=" + c.value);
    ScopedEnv env(c.variable, c.value);
    expect_error<ConfigError>([] { cudagraph_trees::TreeConfig::from_environment(); },
                              {c.variable, c.value});
  }
  // Valid values still parse.
  ScopedEnv env("GROVE_CUDAGRAPHS_RERECORD_LIMIT", "7");
  EXPECT_EQ(cudagraph_trees::TreeConfig::from_environment().rerecord_limit, 7);
}

}  // namespace
}  // namespace grove::reliability
