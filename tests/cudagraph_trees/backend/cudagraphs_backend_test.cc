// The "cudagraphs" backend on sim (and cuda when present): bitwise equal to
// "eager" for both benchmark models across warm-up, recording and replays;
// piecewise capture around a nonzero; cpu programs fall back with the reason;
// strict mode throws; stats reachable from the compiled model.
#include "cudagraph_trees/backend/cudagraphs_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/config.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::TensorList;
using compiler::backends::compile;
using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::Device;
using runtime::DType;
using runtime::Tensor;

// New seeded random values for every `input` of the program.
TensorList random_inputs(const compiler::ir::Program& program, Device device, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TensorList inputs;
  for (ValueId id : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    const compiler::ir::Value& value = program.value(id);
    int64_t count = runtime::shape_numel(value.type.shape);
    if (value.type.dtype == DType::kI64) {
      std::uniform_int_distribution<int64_t> token(0, 15);
      std::vector<int64_t> values(static_cast<size_t>(count));
      for (int64_t& v : values) v = token(rng);
      inputs.push_back(Tensor::from_vector(values, value.type.shape, device));
    } else {
      std::normal_distribution<float> normal(0, 1);
      std::vector<float> values(static_cast<size_t>(count));
      for (float& v : values) v = normal(rng);
      inputs.push_back(Tensor::from_vector(values, value.type.shape, device));
    }
  }
  return inputs;
}

// The outputs as host bits (read before the next call overwrites replay outputs).
std::vector<std::vector<float>> host_values(const TensorList& outputs) {
  std::vector<std::vector<float>> values;
  for (const Tensor& output : outputs) {
    if (output.dtype() == DType::kF32) {
      values.push_back(output.to_vector<float>());
    } else {
      std::vector<double> doubles = output.to_doubles();
      values.emplace_back(doubles.begin(), doubles.end());
    }
  }
  return values;
}

nlohmann::json stats_of(const CompiledModel& model) {
  return grove::compiler::backends::stats_json(model.backend_stats());
}

class CudagraphsBackend : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && runtime::cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    register_cudagraphs_backend();
    reset_tree_managers();
  }
  void TearDown() override { reset_tree_managers(); }

  // Calls both backends `calls` times with new random inputs; bitwise equal.
  void expect_bitwise_equal_to_eager(const compiler::ir::Program& program, int calls) {
    CompiledModel eager = compile(program, {.backend = "eager"});
    CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
    for (int call = 0; call < calls; ++call) {
      TensorList inputs = random_inputs(program, GetParam(), 100 + static_cast<uint64_t>(call));
      auto expected = host_values(eager(inputs));
      auto got = host_values(graphs(inputs));
      ASSERT_EQ(got.size(), expected.size());
      for (size_t o = 0; o < got.size(); ++o) {
        ASSERT_EQ(got[o].size(), expected[o].size());
        EXPECT_EQ(std::memcmp(got[o].data(), expected[o].data(), got[o].size() * sizeof(float)), 0)
            << program.name() << " call " << call << " output " << o;
      }
    }
    nlohmann::json stats = stats_of(graphs);
    EXPECT_GE(stats["tree"]["recordings"].get<int64_t>(), 1) << stats.dump();
    EXPECT_GE(stats["tree"]["replays"].get<int64_t>(), 1) << stats.dump();
    EXPECT_EQ(stats["programs"][0]["fallback_segments"].get<int64_t>(), 0) << stats.dump();
  }
};

TEST_P(CudagraphsBackend, RegistrationIsIdempotentAndListed) {
  register_cudagraphs_backend();
  std::vector<std::string> names = compiler::backends::backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cudagraphs"), names.end());
  EXPECT_EQ(compiler::backends::make_backend("cudagraphs")->name(), "cudagraphs");
}

// Note [Trees follow their functions] (tree_manager.h): a server that loads
// and unloads models gets its device memory back.
TEST_P(CudagraphsBackend, DestroyedModelReturnsTheDeviceMemoryItsTreeHeld) {
  runtime::CachingAllocator& allocator = runtime::device_context(GetParam()).allocator();
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 2}}, GetParam());
  TensorList inputs = random_inputs(program, GetParam(), 7);
  allocator.empty_cache();
  size_t before = allocator.stats(runtime::kDefaultPool).reserved_bytes;
  const void* output_address = nullptr;
  {
    CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
    for (int call = 0; call < 4; ++call) output_address = graphs(inputs)[0].address();
    TreeManager* manager = find_tree_manager(GetParam());
    ASSERT_NE(manager, nullptr);
    EXPECT_GE(manager->node_count(), 1u);
    EXPECT_TRUE(allocator.pool_containing(output_address).has_value());
  }
  EXPECT_EQ(find_tree_manager(GetParam()), nullptr);
  EXPECT_FALSE(allocator.pool_containing(output_address).has_value());
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats(runtime::kDefaultPool).reserved_bytes, before);
}

TEST_P(CudagraphsBackend, Mlp16x512MatchesEagerBitwiseOverWarmupRecordAndReplays) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 2}}, GetParam());
  expect_bitwise_equal_to_eager(program, 4);
}

TEST_P(CudagraphsBackend, Gpt4x256MatchesEagerBitwiseOverWarmupRecordAndReplays) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/gpt4x256.json", {{"batch", 1}, {"seq", 8}}, GetParam());
  expect_bitwise_equal_to_eager(program, 4);
}

compiler::ir::Program nonzero_in_the_middle(Device device) {
  ProgramBuilder b("piecewise", device);
  ValueId x = b.input("x", {4, 4});
  ValueId squared = b.mul(x, x, "square");
  ValueId mask = b.compare("gt", squared, b.full(1.0), "big");
  ValueId indices = b.nonzero(mask, "where_big");
  ValueId exps = b.exp(squared, "exps");
  b.output(indices);
  b.output(exps);
  return b.build();
}

TEST_P(CudagraphsBackend, NonzeroInTheMiddleRunsCapturedEagerCaptured) {
  clear_recent_log();
  LogLevel saved = log_level();
  set_log_level(LogLevel::kInfo);
  compiler::ir::Program program = nonzero_in_the_middle(GetParam());
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  set_log_level(saved);
  for (int call = 0; call < 4; ++call) {
    TensorList inputs = random_inputs(program, GetParam(), 7 + static_cast<uint64_t>(call));
    TensorList expected = eager(inputs);
    TensorList got = graphs(inputs);
    EXPECT_EQ(got[0].to_doubles(), expected[0].to_doubles()) << "call " << call;
    EXPECT_EQ(got[1].to_vector<float>(), expected[1].to_vector<float>()) << "call " << call;
  }
  nlohmann::json stats = stats_of(graphs);
  const nlohmann::json& segments = stats["programs"][0]["segments"];
  ASSERT_EQ(segments.size(), 3u) << stats.dump();
  EXPECT_TRUE(segments[0]["captured"].get<bool>());
  EXPECT_FALSE(segments[1]["captured"].get<bool>());
  EXPECT_TRUE(segments[2]["captured"].get<bool>());
  std::string reason = segments[1]["reason"];
  EXPECT_NE(reason.find("not captured:"), std::string::npos) << reason;
  EXPECT_NE(reason.find("at nonzero in piecewise:where_big"), std::string::npos) << reason;
  EXPECT_EQ(stats["programs"][0]["fallback_segments"].get<int64_t>(), 1);
  EXPECT_NE(recent_log().find(reason), std::string::npos) << recent_log();
  // Two captured segments: each recorded once, then replayed.
  EXPECT_EQ(stats["tree"]["recordings"].get<int64_t>(), 2) << stats.dump();
  EXPECT_GE(stats["tree"]["replays"].get<int64_t>(), 2) << stats.dump();
  EXPECT_NE(graphs.backend_dot().find("digraph"), std::string::npos);
}

// The fuzzer's seed 26715 (tests/fuzz/known_failures): segment 0 computes
// `shifted = x - c`, a nonzero splits the program, and segment 2 reads x again.
compiler::ir::Program input_read_after_nonzero(Device device,
                                               const runtime::Shape& x_shape = {5, 2}) {
  ProgramBuilder b("fed_back", device);
  ValueId x = b.input("x", x_shape);
  ValueId y = b.input("y", {2, 4});
  ValueId shifted = b.sub(x, b.full(-1.6903430867767089), "shifted");
  ValueId indices = b.nonzero(b.compare("gt", y, b.full(0.0), "positive"), "where_positive");
  ValueId squared = b.mul(x, x, "squared");
  b.output(shifted);
  b.output(squared);
  b.output(indices);
  return b.build();
}

// Runs input_read_after_nonzero in "eager" and "cudagraphs" for `calls` calls,
// comparing each call's outputs bitwise; from the first replay on (calls 0
// and 1 warm up and record, whose outputs a new generation invalidates) each
// backend's `shifted` of the last call, as `viewed` gives it, is fed back as x.
// Returns the cudagraphs stats.
nlohmann::json fed_back_calls_match(Device device, const runtime::Shape& x_shape, uint64_t seed,
                                    int calls,
                                    const std::function<Tensor(const Tensor&, int)>& viewed) {
  compiler::ir::Program program = input_read_after_nonzero(device, x_shape);
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList eager_inputs = random_inputs(program, device, seed);
  TensorList graphs_inputs = eager_inputs;
  for (int call = 0; call < calls; ++call) {
    TensorList expected = eager(eager_inputs);
    TensorList got = graphs(graphs_inputs);
    EXPECT_EQ(got.size(), 3u);
    if (got.size() != 3u) break;
    EXPECT_EQ(got[0].to_vector<float>(), expected[0].to_vector<float>()) << "call " << call;
    EXPECT_EQ(got[1].to_vector<float>(), expected[1].to_vector<float>()) << "call " << call;
    EXPECT_EQ(got[2].to_doubles(), expected[2].to_doubles()) << "call " << call;
    TensorList fresh = random_inputs(program, device, seed + 1 + static_cast<uint64_t>(call));
    eager_inputs = call >= 2 ? TensorList{viewed(expected[0], call), fresh[1]} : fresh;
    graphs_inputs = call >= 2 ? TensorList{viewed(got[0], call), fresh[1]} : fresh;
  }
  return stats_of(graphs);
}

// Note [Pool inputs of piecewise programs]: the previous replay's output is
// fed back as x. The new call's first replay writes into x's pool block, so
// without a private copy the last segment reads `x - c` instead of x.
TEST_P(CudagraphsBackend, FedBackReplayOutputReadAfterTheFirstSegmentKeepsItsValues) {
  nlohmann::json stats =
      fed_back_calls_match(GetParam(), {5, 2}, 26715, 6, [](const Tensor& t, int) { return t; });
  ASSERT_EQ(stats["programs"][0]["segments"].size(), 3u) << stats.dump();
  EXPECT_GE(stats["tree"]["replays"].get<int64_t>(), 4) << stats.dump();
  tree_manager_for(GetParam()).verify();
}

// Note [Private copies keep each element] (prepared_program.cc): the fed-back
// replay output reaches the program as a view with other strides (transposed;
// one row broadcast), as a PyTorch step between two of grove's graphs hands it
// on (HF Longformer's as_strided chunks). The private copy was one flat copy of
// numel * size bytes from the view's first element: the transposed values came
// in storage order (Longformer's cudagraphs gradients 1.5 off eager) and the
// broadcast row read past its block.
TEST_P(CudagraphsBackend, FedBackReplayOutputViewedWithOtherStridesKeepsItsValues) {
  nlohmann::json stats =
      fed_back_calls_match(GetParam(), {4, 4}, 30117, 8, [](const Tensor& t, int call) {
        return call % 2 == 0 ? t.transpose(0, 1) : t.slice(0, 1, 2).expand({4, 4});
      });
  EXPECT_GE(stats["tree"]["replays"].get<int64_t>(), 4) << stats.dump();
  tree_manager_for(GetParam()).verify();
}

// The fuzzer's seed 1542: a one-segment program returns its input x as an
// output; the previous replay's `squared` is fed back as x. The replay writes
// `squared` into the block that x (and so the returned output 0) lives in.
TEST_P(CudagraphsBackend, FedBackReplayOutputReturnedAsAnOutputKeepsItsValues) {
  ProgramBuilder b("returns_input", GetParam());
  ValueId x = b.input("x", {3});
  b.output(x);
  b.output(b.mul(x, x, "squared"));
  compiler::ir::Program program = b.build();
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList eager_inputs = random_inputs(program, GetParam(), 1542);
  TensorList graphs_inputs = eager_inputs;
  for (int call = 0; call < 6; ++call) {
    TensorList expected = eager(eager_inputs);
    TensorList got = graphs(graphs_inputs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].to_vector<float>(), expected[0].to_vector<float>()) << "call " << call;
    EXPECT_EQ(got[1].to_vector<float>(), expected[1].to_vector<float>()) << "call " << call;
    // From the first replay on, feed `squared` back as x.
    TensorList fresh = random_inputs(program, GetParam(), 1543 + static_cast<uint64_t>(call));
    eager_inputs = call >= 2 ? TensorList{expected[1]} : fresh;
    graphs_inputs = call >= 2 ? TensorList{got[1]} : fresh;
  }
  EXPECT_GE(stats_of(graphs)["tree"]["replays"].get<int64_t>(), 4);
  tree_manager_for(GetParam()).verify();
}

// The fuzzer's seed 80421 (found on cuda): x1 += x0 in place, and the program
// returns a view of x0. One replay output fed back as both x0 and x1 makes
// the write show through the returned view in eager; a private copy of x0
// (Note [Pool inputs of piecewise programs]) would hide it.
TEST_P(CudagraphsBackend, FedBackOutputPassedAsReturnedAndMutatedInputSeesTheWrite) {
  ProgramBuilder b("returns_input_mutates_alias", GetParam());
  ValueId x0 = b.input("x0", {4});
  ValueId x1 = b.input("x1", {4});
  ValueId sum = b.add(x1, x0, "sum");
  b.copy_into(x1, sum, "update");
  b.output(b.reshape(x0, {2, 2}, "view"));
  b.output(b.mul(x0, x0, "squared"));
  compiler::ir::Program program = b.build();
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList eager_inputs = random_inputs(program, GetParam(), 80421);
  TensorList graphs_inputs = random_inputs(program, GetParam(), 80421);
  for (int call = 0; call < 6; ++call) {
    TensorList expected = eager(eager_inputs);
    TensorList got = graphs(graphs_inputs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].to_vector<float>(), expected[0].to_vector<float>()) << "call " << call;
    EXPECT_EQ(got[1].to_vector<float>(), expected[1].to_vector<float>()) << "call " << call;
    EXPECT_EQ(graphs_inputs[1].to_vector<float>(), eager_inputs[1].to_vector<float>())
        << "call " << call;
    // From the first replay on, feed `squared` back as both x0 and x1.
    TensorList fresh = random_inputs(program, GetParam(), 80422 + static_cast<uint64_t>(call));
    TensorList fresh_copy = random_inputs(program, GetParam(), 80422 + static_cast<uint64_t>(call));
    eager_inputs = call >= 2 ? TensorList{expected[1], expected[1]} : fresh;
    graphs_inputs = call >= 2 ? TensorList{got[1], got[1]} : fresh_copy;
  }
  nlohmann::json stats = stats_of(graphs);
  EXPECT_GE(stats["programs"][0]["pool_mutation_fallbacks"].get<int64_t>(), 1) << stats.dump();
  tree_manager_for(GetParam()).verify();
}

// The fuzzer's seed 5814: a piecewise program (nonzero in the middle) reads
// x0 through a view made before the sync and writes x8 in place after it.
// With one tensor passed as both x0 and x8, eager's view sees the write;
// a replayed first segment would hand on a view of its snapshot of x0
// (Note [Aliased mutated inputs of piecewise programs]).
TEST_P(CudagraphsBackend, PiecewiseProgramWithAMutatedInputAliasingAnotherRunsEagerly) {
  ProgramBuilder b("piecewise_mutated_alias", GetParam());
  ValueId x0 = b.input("x0", {2, 1});
  ValueId x8 = b.input("x8", {2, 1});
  ValueId row = b.slice(x0, 0, 1, 2, "row");
  ValueId positive = b.compare("gt", b.mean(x0, {1}), b.full(0.0), "positive");
  ValueId where = b.nonzero(positive, "where");
  b.copy_into(x8, b.add(x8, b.mul(x0, x0)), "update");
  b.output(b.concat({row, row}, 0, "pair"));
  b.output(where);
  compiler::ir::Program program = b.build();
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  for (int call = 0; call < 6; ++call) {
    // One tensor as both inputs from call 3 on; fresh ones before.
    TensorList eager_inputs = random_inputs(program, GetParam(), 5814 + call);
    TensorList graphs_inputs = random_inputs(program, GetParam(), 5814 + call);
    if (call >= 3) {
      eager_inputs[1] = eager_inputs[0];
      graphs_inputs[1] = graphs_inputs[0];
    }
    TensorList expected = eager(eager_inputs);
    TensorList got = graphs(graphs_inputs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].to_vector<float>(), expected[0].to_vector<float>()) << "call " << call;
    EXPECT_EQ(graphs_inputs[0].to_vector<float>(), eager_inputs[0].to_vector<float>())
        << "call " << call;
  }
  nlohmann::json stats = stats_of(graphs);
  EXPECT_GE(stats["programs"][0]["pool_mutation_fallbacks"].get<int64_t>(), 3) << stats.dump();
  tree_manager_for(GetParam()).verify();
}

// The keys of a JSON object, sorted.
std::vector<std::string> keys_of(const nlohmann::json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, unused] : object.items()) keys.push_back(key);
  return keys;
}

// Reports cross the door as values (docs/ARCHITECTURE.md, "Reports are
// values"); their JSON, which the C API returns as text, keeps the keys the
// C API returned when the backend wrote the text itself.
TEST_P(CudagraphsBackend, StatsAreValuesWhoseJsonKeepsTheCApiKeys) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 2}}, GetParam());
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList inputs = random_inputs(program, GetParam(), 19);
  for (int call = 0; call < 4; ++call) graphs(inputs);  // warm-up, record, replays
  eager(inputs);
  EXPECT_EQ(grove::compiler::backends::stats_json(eager.backend_stats()).dump(), "{}");
  EXPECT_EQ(grove::compiler::backends::memory_json(eager.backend_memory()).dump(), "{}");

  const compiler::backends::BackendStats stats = graphs.backend_stats();
  EXPECT_EQ(stats.backend, "cudagraphs");
  ASSERT_EQ(stats.programs.size(), 1u);
  EXPECT_EQ(stats.programs[0].calls, 4);
  ASSERT_TRUE(stats.tree.has_value());
  EXPECT_EQ(stats.tree->counters.replays, 2u);
  EXPECT_EQ(stats.tree->device, GetParam().str());
  EXPECT_FALSE(stats.tree->live_blocks_at_shutdown.has_value());

  const nlohmann::json json = grove::compiler::backends::stats_json(stats);
  EXPECT_EQ(keys_of(json), (std::vector<std::string>{"backend", "programs", "tree"}));
  EXPECT_EQ(keys_of(json["programs"][0]),
            (std::vector<std::string>{"calls", "device", "fallback_segments", "lowered", "model",
                                      "pool_mutation_fallbacks", "segments"}));
  // What a call runs, step by step (LoweredProgram::describe()): the GEMM of
  // each layer, as cuBLAS-style GEMMs on sim or as the small-M kernels that
  // cuda picks for two rows (Note [Small-M GEMM selection]).
  const std::string lowered = json["programs"][0]["lowered"].get<std::string>();
  const bool names_the_gemms = lowered.find("gemm x1 m=2 n=512 k=512") != std::string::npos ||
                               (lowered.find("small_m_gemm") != std::string::npos &&
                                lowered.find("<- fc15") != std::string::npos);
  EXPECT_TRUE(names_the_gemms) << lowered;
  const nlohmann::json& tree = json["tree"];
  EXPECT_EQ(tree["replays"], 2u);
  EXPECT_EQ(keys_of(tree["pool"]),
            (std::vector<std::string>{"allocated_bytes", "free_blocks", "live_blocks",
                                      "peak_allocated_bytes", "reserved_bytes", "segments"}));
  EXPECT_EQ(keys_of(tree["bookkeeping"]),
            (std::vector<std::string>{"checkpoint_blocks", "checkpoint_segments", "child_slots",
                                      "estimated_host_bytes", "path_list_entries"}));
  ASSERT_FALSE(tree["functions"].empty());
  EXPECT_EQ(keys_of(tree["functions"][0]),
            (std::vector<std::string>{"id", "mode", "name", "roots", "warmed_signatures"}));
  const std::vector<std::string> tree_keys = {"bookkeeping",
                                              "capture_failures",
                                              "checkpoint_restores",
                                              "copy_back_inputs",
                                              "copy_source_patches",
                                              "current_node",
                                              "demoted_inputs",
                                              "device",
                                              "eager_calls",
                                              "fallback_calls",
                                              "fallback_decisions",
                                              "functions",
                                              "generation",
                                              "graph_copy_inputs",
                                              "input_copies",
                                              "input_copies_in_graph",
                                              "input_copy_backs",
                                              "input_patches",
                                              "managed_input_writes",
                                              "nodes",
                                              "outputs_cloned",
                                              "outputs_overwritten",
                                              "outputs_poisoned",
                                              "pending_backward_blocks",
                                              "pool",
                                              "recordings",
                                              "replays",
                                              "rerecord_reasons",
                                              "rerecords",
                                              "roots",
                                              "shut_down",
                                              "staged_input_copies",
                                              "state",
                                              "state_tensors_moved",
                                              "static_input_writes",
                                              "warmups",
                                              "zero_copy_inputs",
                                              "zero_copy_refusals"};
  EXPECT_EQ(keys_of(tree), tree_keys);
}

// The one door: the compiled model reaches its tree through the backend
// (memory, the graphs of the last path, mark_step_begin, reset) without
// naming the tree manager.
TEST_P(CudagraphsBackend, CompiledModelReachesItsTreeThroughTheBackend) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 2}}, GetParam());
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList inputs = random_inputs(program, GetParam(), 18);
  for (int call = 0; call < 3; ++call) graphs(inputs);  // warm-up, record, replay
  nlohmann::json memory = grove::compiler::backends::memory_json(graphs.backend_memory());
  EXPECT_EQ(memory["device"], GetParam().str()) << memory.dump();
  EXPECT_GT(memory["pool"]["reserved_bytes"].get<int64_t>(), 0) << memory.dump();
  EXPECT_GE(memory["pool"]["segments"].get<int64_t>(), 1) << memory.dump();
  EXPECT_EQ(graphs.backend_graphs().size(), 1u);
  EXPECT_FALSE(graphs.backend_dot().empty());

  TreeManager* tree = find_tree_manager(GetParam());
  ASSERT_NE(tree, nullptr);
  int64_t generation = tree->generation();
  graphs.mark_step_begin();
  EXPECT_NE(tree->generation(), generation);
  int64_t marked = tree->generation();
  graphs(inputs);
  EXPECT_EQ(tree->generation(), marked);  // once marked, only marks start generations

  graphs.reset_backend();
  EXPECT_EQ(find_tree_manager(GetParam()), nullptr);
  EXPECT_FALSE(graphs.backend_memory().device.has_value());
  EXPECT_TRUE(graphs.backend_graphs().empty());
  graphs.reset_backend();  // nothing left to drop
  // The next calls record anew in a new tree.
  for (int call = 0; call < 3; ++call) graphs(inputs);
  nlohmann::json stats = stats_of(graphs);
  EXPECT_EQ(stats["tree"]["recordings"].get<int64_t>(), 1) << stats.dump();
  EXPECT_EQ(stats["tree"]["replays"].get<int64_t>(), 1) << stats.dump();
}

// Note [Function controls] through the one door: CompileOptions' never_capture
// and skip_warmup reach the tree as the segments' spec.
TEST_P(CudagraphsBackend, CompileOptionsNeverCaptureAndSkipWarmupReachTheTree) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 2}}, GetParam());
  TensorList inputs = random_inputs(program, GetParam(), 21);
  CompiledModel eager = compile(program, {.backend = "eager"});
  auto expected = host_values(eager(inputs));
  {
    CompiledModel skipped = compile(program, {.backend = "cudagraphs", .never_capture = true});
    for (int call = 0; call < 3; ++call) EXPECT_EQ(host_values(skipped(inputs)), expected);
    nlohmann::json tree = stats_of(skipped)["tree"];
    EXPECT_EQ(tree["recordings"].get<int64_t>(), 0) << tree.dump();
    EXPECT_EQ(tree["fallback_calls"]["skipped"].get<int64_t>(), 3) << tree.dump();
  }
  CompiledModel direct = compile(program, {.backend = "cudagraphs", .skip_warmup = true});
  for (int call = 0; call < 3; ++call) EXPECT_EQ(host_values(direct(inputs)), expected);
  nlohmann::json tree = stats_of(direct)["tree"];
  EXPECT_EQ(tree["warmups"].get<int64_t>(), 0) << tree.dump();
  EXPECT_EQ(tree["recordings"].get<int64_t>(), 1) << tree.dump();
  EXPECT_EQ(tree["replays"].get<int64_t>(), 2) << tree.dump();
}

TEST_P(CudagraphsBackend, StrictModeThrowsInsteadOfFallingBack) {
  ::setenv("GROVE_CUDAGRAPHS_STRICT", "1", 1);
  reset_tree_managers();
  try {
    compile(nonzero_in_the_middle(GetParam()), {.backend = "cudagraphs"});
    ADD_FAILURE() << "expected NotCapturedError";
  } catch (const NotCapturedError& error) {
    EXPECT_NE(std::string(error.what()).find("nonzero"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("strict"), std::string::npos) << error.what();
  }
  ::unsetenv("GROVE_CUDAGRAPHS_STRICT");
  reset_tree_managers();
}

INSTANTIATE_TEST_SUITE_P(Devices, CudagraphsBackend,
                         ::testing::Values(runtime::kSimDevice, runtime::kCudaDevice),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return info.param.is_sim() ? std::string("sim") : std::string("cuda");
                         });

TEST(CudagraphsBackendCpu, CpuProgramIsNotCapturedAndSaysWhy) {
  register_cudagraphs_backend();
  compiler::ir::Program program = nonzero_in_the_middle(runtime::kCpuDevice);
  CompiledModel eager = compile(program, {.backend = "eager"});
  CompiledModel graphs = compile(program, {.backend = "cudagraphs"});
  TensorList inputs = random_inputs(program, runtime::kCpuDevice, 3);
  EXPECT_EQ(graphs(inputs)[1].to_vector<float>(), eager(inputs)[1].to_vector<float>());
  nlohmann::json stats = stats_of(graphs);
  EXPECT_FALSE(stats.contains("tree")) << stats.dump();
  EXPECT_EQ(stats["programs"][0]["fallback_segments"].get<int64_t>(), 3) << stats.dump();
  for (const auto& segment : stats["programs"][0]["segments"]) {
    EXPECT_FALSE(segment["captured"].get<bool>());
    EXPECT_NE(segment["reason"].get<std::string>().find("not captured:"), std::string::npos);
  }
  std::string first = stats["programs"][0]["segments"][0]["reason"];
  EXPECT_NE(first.find("cpu"), std::string::npos) << first;
}

}  // namespace
}  // namespace grove::cudagraph_trees::backend
