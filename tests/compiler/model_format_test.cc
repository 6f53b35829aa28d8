#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/model_format/model_json.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/error.h"

namespace grove::compiler::model_format {
namespace {

using ir::DType;
using ir::Program;
using reference::HostTensor;

std::string read_model(const std::string& name) {
  std::ifstream file("benchmarks/models/" + name + ".json");
  EXPECT_TRUE(file.good()) << "cannot open benchmarks/models/" << name << ".json";
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Expects load_model(text) to throw a ModelFormatError whose message contains every part.
void expect_format_error(const std::string& text, const std::vector<std::string>& parts) {
  try {
    load_model(text);
    ADD_FAILURE() << "no ModelFormatError for:\n" << text;
  } catch (const ModelFormatError& error) {
    std::string message = error.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << message;
    }
  }
}

// A small valid model; `node` replaces the second node's JSON.
std::string tiny_model(
    const std::string& node = R"({"name": "act", "op": "relu", "inputs": ["fc"]})",
    const std::string& extra_top = "") {
  return R"({"name": "tiny", "dims": {"batch": 2},)" + extra_top + R"(
    "inputs": [{"name": "x", "shape": ["batch", 4], "dtype": "f32"}],
    "params": [{"name": "w", "shape": [3, 4], "dtype": "f32",
                "init": {"kind": "normal", "std": 0.5, "seed": 3}}],
    "nodes": [{"name": "fc", "op": "linear", "inputs": ["x", "w"]}, )" +
         node + R"(],
    "outputs": ["act"]})";
}

TEST(ModelFormat, LoadsBenchmarkModelsWithBoundDims) {
  Program mlp = load_model(read_model("mlp16x512"), {{"batch", 256}}, runtime::kSimDevice);
  EXPECT_EQ(mlp.inputs_of_kind(ir::ValueKind::kParam).size(), 32u);
  EXPECT_EQ(mlp.nodes().size(), 32u);
  EXPECT_EQ(mlp.value(mlp.outputs()[0]).type.shape, (ir::Shape{256, 512}));
  EXPECT_EQ(mlp.value(mlp.outputs()[0]).type.device, runtime::kSimDevice);

  Program gpt = load_model(read_model("gpt4x256"), {{"batch", 2}, {"seq", 16}});
  EXPECT_EQ(gpt.value(gpt.outputs()[0]).type.shape, (ir::Shape{2, 16, 512}));
  EXPECT_EQ(gpt.value(gpt.inputs()[0]).type.dtype, DType::kI64);
  EXPECT_EQ(gpt.inputs_of_kind(ir::ValueKind::kBuffer).size(), 1u);
  EXPECT_EQ(gpt.dims().at("seq"), 16);
}

TEST(ModelFormat, RoundTripsBothBenchmarkModels) {
  for (const std::string name : {"mlp16x512", "gpt4x256"}) {
    Program original = load_model(read_model(name), {}, runtime::kSimDevice);
    std::string exported = export_model(original);
    Program reloaded = load_model(exported, {}, runtime::kSimDevice);
    EXPECT_TRUE(original == reloaded) << name;
    EXPECT_EQ(export_model(reloaded), exported) << name;
    EXPECT_EQ(original.str(), reloaded.str()) << name;
  }
}

TEST(ModelFormat, GptReferenceRunGivesCausalFiniteLogits) {
  Program gpt = load_model(read_model("gpt4x256"), {{"batch", 1}, {"seq", 8}});
  reference::HostTensorList inputs = reference::initial_state(gpt);
  std::mt19937 rng(7);
  HostTensor tokens{{1, 8}, DType::kI64, {}};
  for (int i = 0; i < 8; ++i) tokens.data.push_back(static_cast<double>(rng() % 512));
  inputs[0] = tokens;
  HostTensor logits = reference::reference_run(gpt, inputs)[0];
  ASSERT_EQ(logits.shape, (ir::Shape{1, 8, 512}));
  for (double value : logits.data) ASSERT_TRUE(std::isfinite(value));
  // Causality: changing the last token leaves earlier positions' logits unchanged.
  inputs[0].data[7] = static_cast<double>((static_cast<int>(tokens.data[7]) + 1) % 512);
  HostTensor changed = reference::reference_run(gpt, inputs)[0];
  for (int64_t t = 0; t < 7; ++t) {
    for (int64_t v = 0; v < 512; v += 37) {
      EXPECT_DOUBLE_EQ(changed.at({0, t, v}), logits.at({0, t, v}));
    }
  }
  EXPECT_NE(changed.at({0, 7, 0}), logits.at({0, 7, 0}));
}

TEST(ModelFormat, DeepJsonIsRejectedWhileParsing) {
  std::string deep =
      "{\"name\": \"deep\", \"x\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  expect_format_error(deep, {"nests deeper than 16 levels"});
}

// Expects read_model_file(path) to throw a ModelFormatError mentioning `part`.
void expect_read_error(const std::string& path, const std::string& part) {
  try {
    read_model_file(path);
    ADD_FAILURE() << "no ModelFormatError for " << path;
  } catch (const ModelFormatError& error) {
    EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
  }
}

TEST(ModelFormat, ModelFilesMustBeRegularAndWithinTheSizeLimit) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  expect_read_error(dir, "is a directory");
  expect_read_error("/dev/zero", "is not a regular file");
  std::string big = dir + "/big_model.json";
  {
    std::ofstream file(big);
    file << std::string(2048, ' ');
  }
  setenv("GROVE_MODEL_MAX_BYTES", "1024", 1);
  expect_read_error(big, "more than the 1024-byte limit");
  unsetenv("GROVE_MODEL_MAX_BYTES");
  EXPECT_EQ(read_model_file(big).size(), 2048u);
}

TEST(ModelFormat, ReportsInvalidJson) { expect_format_error("{\"name\": ", {"does not parse"}); }

TEST(ModelFormat, ReportsUnknownOpWithNodeAndField) {
  expect_format_error(tiny_model(R"({"name": "act", "op": "frobnicate", "inputs": ["fc"]})"),
                      {"node 'act'", "field 'op'", "frobnicate"});
}

TEST(ModelFormat, ReportsMissingField) {
  expect_format_error(tiny_model(R"({"name": "act", "op": "relu"})"),
                      {"node 'act'", "field 'inputs'", "missing"});
}

TEST(ModelFormat, ReportsWrongFieldType) {
  expect_format_error(tiny_model(R"({"name": "act", "op": "relu", "inputs": "fc"})"),
                      {"node 'act'", "field 'inputs'", "array"});
  expect_format_error(
      tiny_model(R"({"name": "act", "op": "softmax", "inputs": ["fc"], "attrs": {"dim": 1.5}})"),
      {"node 'act'", "field 'attrs.dim'", "integer"});
}

TEST(ModelFormat, ReportsUnknownValueName) {
  expect_format_error(tiny_model(R"({"name": "act", "op": "relu", "inputs": ["nope"]})"),
                      {"node 'act'", "field 'inputs[0]'", "'nope'"});
}

TEST(ModelFormat, ReportsUseBeforeDefinitionAndCycles) {
  // "act" reads "later", defined by the node after it.
  std::string text = tiny_model(
      R"({"name": "act", "op": "relu", "inputs": ["later"]},
         {"name": "later", "op": "neg", "inputs": ["act"]})");
  expect_format_error(text, {"node 'act'", "field 'inputs[0]'", "before node 'later'"});
  expect_format_error(tiny_model(R"({"name": "act", "op": "relu", "inputs": ["act"]})"),
                      {"node 'act'", "field 'inputs[0]'", "before node 'act'", "cycles"});
}

TEST(ModelFormat, ReportsBadShapesNamingNode) {
  // linear of [batch, 4] with a [3, 4] weight gives [batch, 3]; adding x [batch, 4] fails.
  expect_format_error(tiny_model(R"({"name": "act", "op": "add", "inputs": ["fc", "x"]})"),
                      {"node 'act'", "field 'inputs'", "broadcast", "'fc'", "'x'"});
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [2, -3]}],
                          "nodes": [], "outputs": []})",
                      {"inputs[0] 'x'", "field 'shape[1]'", "negative"});
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [2, "width"]}],
                          "nodes": [], "outputs": []})",
                      {"inputs[0] 'x'", "field 'shape[1]'", "width"});
}

TEST(ModelFormat, ReportsAbsurdSizes) {
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [65536, 65536]}],
                          "nodes": [], "outputs": []})",
                      {"inputs[0] 'x'", "field 'shape'", "2^31"});
}

// Issue 24, item 3: the product of a reshape's sizes wrapped to 16 in int64
// and passed; a following sum read out of bounds.
TEST(ModelFormat, ReshapeWhoseSizesOverflowIsRejectedNamingTheNode) {
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [16]}],
                          "nodes": [{"name": "r", "op": "reshape", "inputs": ["x"],
                                     "attrs": {"shape": [4611686018427387905, 4, 4]}}],
                          "outputs": ["r"]})",
                      {"node 'r'", "64-bit"});
}

// Issue 24, item 10: a size past int64 said "is negative (-1)"; an unknown
// op pointed at OpRegistry::op_names() instead of naming the ops.
TEST(ModelFormat, SizesBeyondInt64AndUnknownOpsAreNamed) {
  expect_format_error(
      R"({"name": "m", "inputs": [{"name": "x", "shape": [18446744073709551615, 8]}],
                          "nodes": [], "outputs": []})",
      {"field 'shape[0]'", "is 18446744073709551615, beyond the largest size"});
  expect_format_error(tiny_model(R"({"name": "act", "op": "gelo", "inputs": ["fc"]})"),
                      {"node 'act'", "'gelo' is not a registered op", "did you mean 'gelu'"});
  expect_format_error(tiny_model(R"({"name": "act", "op": "zzzzzzzzzzzz", "inputs": ["fc"]})"),
                      {"known ops: ", "relu"});
}

// Issue 24, item 9: uniform +-1e308 into f32 and constant 1e300 were accepted
// and training printed -nan.
TEST(ModelFormat, InitializersTheDtypeCannotHoldAreRejected) {
  auto model_with_init = [](const std::string& init) {
    return R"({"name": "m", "inputs": [{"name": "x", "shape": [2]}],
               "params": [{"name": "w", "shape": [2], "dtype": "f32", "init": )" +
           init + R"(}], "nodes": [{"name": "y", "op": "add", "inputs": ["x", "w"]}],
               "outputs": ["y"]})";
  };
  expect_format_error(model_with_init(R"({"kind": "uniform", "low": -1e308, "high": 1e308})"),
                      {"params[0] 'w'", "field 'init.low'", "f32 cannot hold"});
  expect_format_error(model_with_init(R"({"kind": "constant", "value": 1e300})"),
                      {"field 'init.value'", "f32 cannot hold"});
  load_model(model_with_init(R"({"kind": "uniform", "low": -3e38, "high": 3e38})"));
}

TEST(ModelFormat, ReportsNestingTooDeep) {
  std::string deep = R"({"name": "m", "description": )" + std::string(40, '[') +
                     std::string(40, ']') + R"(, "nodes": [], "outputs": []})";
  expect_format_error(deep, {"deeper than 16"});
}

TEST(ModelFormat, ReportsBadInitializerAndDtype) {
  expect_format_error(R"({"name": "m", "params": [{"name": "w", "shape": [2],
                          "init": {"kind": "gaussian"}}], "nodes": [], "outputs": []})",
                      {"params[0] 'w'", "field 'init.kind'", "gaussian"});
  expect_format_error(R"({"name": "m", "params": [{"name": "w", "shape": [2]}],
                          "nodes": [], "outputs": []})",
                      {"params[0] 'w'", "field 'init'", "missing"});
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [2], "dtype": "f8"}],
                          "nodes": [], "outputs": []})",
                      {"inputs[0] 'x'", "field 'dtype'", "f8"});
}

TEST(ModelFormat, ReportsUnknownAttributeAndUnknownField) {
  expect_format_error(
      tiny_model(R"({"name": "act", "op": "relu", "inputs": ["fc"], "attrs": {"alpha": 1}})"),
      {"node 'act'", "field 'attrs.alpha'"});
  expect_format_error(tiny_model(R"({"name": "act", "op": "relu", "inputs": ["fc"], "colour": 1})"),
                      {"node 'act'", "field 'colour'", "not a known field"});
}

TEST(ModelFormat, ReportsDuplicateNamesAndUnknownOutputs) {
  expect_format_error(tiny_model(R"({"name": "fc", "op": "relu", "inputs": ["x"]})"),
                      {"node 'fc'", "field 'name'"});
  expect_format_error(R"({"name": "m", "inputs": [{"name": "x", "shape": [2]}],
                          "nodes": [], "outputs": ["y"]})",
                      {"field 'outputs[0]'", "'y'"});
}

TEST(ModelFormat, ReportsUnknownDimBinding) {
  try {
    load_model(tiny_model(), {{"sequence", 4}});
    ADD_FAILURE() << "binding an undeclared dim must fail";
  } catch (const ModelFormatError& error) {
    EXPECT_NE(std::string(error.what()).find("sequence"), std::string::npos) << error.what();
  }
}

TEST(ModelFormat, TinyModelComputesLinearRelu) {
  Program program = load_model(tiny_model(), {{"batch", 3}});
  reference::HostTensorList inputs = reference::initial_state(program);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  HostTensor x{{3, 4}, DType::kF32, {}};
  for (int i = 0; i < 12; ++i) x.data.push_back(normal(rng));
  inputs[0] = x;
  HostTensor out = reference::reference_run(program, inputs)[0];
  const HostTensor& w = inputs[1];
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 3; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 4; ++k) acc += x.at({r, k}) * w.at({j, k});
      EXPECT_NEAR(out.at({r, j}), std::max(acc, 0.0), 1e-12);
    }
  }
}

}  // namespace
}  // namespace grove::compiler::model_format
