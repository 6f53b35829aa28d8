// Note [Implicit generator] (compiler/ir/generator_state.h): dropout drawing
// from the device's Philox generator draws fresh numbers at every call and
// replay, the same numbers in eager and cudagraphs for the same generator
// state, exactly philox_uniform(seed, offset + i) per element, and a seed set
// between calls takes effect.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/generator_state.h"
#include "compiler/model_format/model_json.h"
#include "compiler/ops/philox.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/philox_generator.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::TensorList;
using compiler::backends::compile;
using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::Device;
using runtime::Tensor;

constexpr double kP = 0.5;

// y1 = dropout(x), y2 = dropout(2 x): two implicit draws of 64 elements each.
compiler::ir::Program two_dropouts(Device device) {
  ProgramBuilder b("two_dropouts", device);
  ValueId x = b.input("x", {8, 8});
  b.output(b.dropout(x, kP, "first"));
  b.output(b.dropout(b.mul(x, b.full(2.0)), kP, "second"));
  return b.build();
}

// What dropout must give for counters starting at `offset` (Note [Dropout randomness]).
std::vector<float> expected_dropout(const std::vector<float>& x, uint64_t seed, uint64_t offset) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bool keep = compiler::ops::philox_uniform(seed, offset + i) >= static_cast<float>(kP);
    y[i] = keep ? x[i] * static_cast<float>(1.0 / (1.0 - kP)) : 0.0f;
  }
  return y;
}

class ImplicitGenerator : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && runtime::cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    register_cudagraphs_backend();
    reset_tree_managers();
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (float& v : x_values_) v = normal(rng);
    x_ = Tensor::from_vector(x_values_, {8, 8}, GetParam());
  }
  void TearDown() override { reset_tree_managers(); }
  runtime::PhiloxGenerator& generator() { return runtime::default_generator(GetParam()); }

  // `calls` calls after manual_seed(seed): every output of every call.
  std::vector<std::vector<float>> run(const CompiledModel& model, uint64_t seed, int calls) {
    generator().manual_seed(seed);
    std::vector<std::vector<float>> values;
    for (int call = 0; call < calls; ++call) {
      for (const Tensor& output : model({x_})) values.push_back(output.to_vector<float>());
    }
    return values;
  }

  std::vector<float> x_values_ = std::vector<float>(64);
  Tensor x_;
};

TEST_P(ImplicitGenerator, EachCallDrawsTheNextCountersExactly) {
  CompiledModel model = compile(two_dropouts(GetParam()), {.backend = "eager"});
  EXPECT_EQ(model.generator_draws(), 128);
  std::vector<std::vector<float>> got = run(model, 1234, 3);
  std::vector<float> doubled(x_values_.size());
  for (size_t i = 0; i < doubled.size(); ++i) doubled[i] = 2.0f * x_values_[i];
  for (int call = 0; call < 3; ++call) {
    const uint64_t base = 128 * static_cast<uint64_t>(call);
    EXPECT_EQ(got[2 * call], expected_dropout(x_values_, 1234, base)) << "call " << call;
    EXPECT_EQ(got[2 * call + 1], expected_dropout(doubled, 1234, base + 64)) << "call " << call;
  }
  EXPECT_NE(got[0], got[2]);  // fresh numbers each call
  EXPECT_EQ(generator().offset(), 3u * 128u);
}

TEST_P(ImplicitGenerator, CudagraphsReplaysDrawTheSameNumbersAsEager) {
  CompiledModel eager = compile(two_dropouts(GetParam()), {.backend = "eager"});
  CompiledModel graphs = compile(two_dropouts(GetParam()), {.backend = "cudagraphs"});
  std::vector<std::vector<float>> expected = run(eager, 99, 5);
  std::vector<std::vector<float>> got = run(graphs, 99, 5);  // warm-up, recording, 3 replays
  EXPECT_EQ(got, expected);
  nlohmann::json tree = grove::compiler::backends::stats_json(graphs.backend_stats())["tree"];
  EXPECT_EQ(tree["replays"].get<int64_t>(), 3) << tree.dump();
  EXPECT_NE(got[6], got[8]);  // two replays, different masks
}

TEST_P(ImplicitGenerator, ASeedSetBetweenReplaysTakesEffect) {
  CompiledModel graphs = compile(two_dropouts(GetParam()), {.backend = "cudagraphs"});
  std::vector<std::vector<float>> first = run(graphs, 7, 4);
  std::vector<std::vector<float>> again = run(graphs, 7, 1);  // a replay after manual_seed(7)
  EXPECT_EQ(again[0], first[0]);
  EXPECT_EQ(again[1], first[1]);
  std::vector<std::vector<float>> other = run(graphs, 8, 1);
  EXPECT_NE(other[0], first[0]);
}

TEST_P(ImplicitGenerator, ModelFilesSayDropoutWithOneInputAndRoundTrip) {
  const std::string text = R"({"name": "drop", "inputs": [{"name": "x", "shape": [8, 8]}],
    "nodes": [{"name": "y", "op": "dropout", "inputs": ["x"], "attrs": {"p": 0.5}}],
    "outputs": ["y"]})";
  compiler::ir::Program program = compiler::model_format::load_model(text, {}, GetParam());
  EXPECT_EQ(compiler::ir::generator_draws(program), 64);
  compiler::ir::Program again = compiler::model_format::load_model(
      compiler::model_format::export_model(program), {}, GetParam());
  EXPECT_EQ(compiler::ir::generator_draws(again), 64);
  CompiledModel model = compile(again, {.backend = "eager"});
  EXPECT_EQ(run(model, 3, 1)[0], expected_dropout(x_values_, 3, 0));
}

INSTANTIATE_TEST_SUITE_P(Devices, ImplicitGenerator,
                         ::testing::Values(runtime::kSimDevice, runtime::kCudaDevice),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return info.param.is_sim() ? std::string("sim") : std::string("cuda");
                         });

TEST(ImplicitGeneratorState, ReserveAdvancesAndManualSeedRestarts) {
  runtime::PhiloxGenerator generator;
  generator.manual_seed(11);
  runtime::PhiloxGenerator::Draw first = generator.reserve(100);
  EXPECT_EQ(first.seed, 11u);
  EXPECT_EQ(first.offset, 0u);
  EXPECT_EQ(generator.reserve(5).offset, 100u);
  generator.manual_seed(11);
  EXPECT_EQ(generator.offset(), 0u);
  EXPECT_THROW(generator.reserve(uint64_t{1} << 63 | 1), Error);
}

TEST(ImplicitGeneratorState, ReservedNamesAndBadProbabilitiesAreRefused) {
  ProgramBuilder b("bad", runtime::kSimDevice);
  ValueId x = b.input("x", {4});
  EXPECT_THROW(b.dropout(x, 1.0, "d"), Error);
  ProgramBuilder clash("clash", runtime::kSimDevice);
  ValueId y = clash.input(compiler::ir::kGeneratorSeed, {4});
  EXPECT_THROW(clash.dropout(y, 0.5, "d"), Error);
}

}  // namespace
}  // namespace grove::cudagraph_trees::backend
