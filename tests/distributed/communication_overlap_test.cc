// Overlap of gradient all-reduces with the backward (Note [Communication
// stream] in runtime/collectives/communication_stream.h): the shape of the
// backward program, the communication stream's fork/join, and the captured
// sim graph, where the all-reduces must form a branch parallel to the
// backward kernels that follow them.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "compiler/autodiff/training_programs.h"
#include "compiler/ir/builder.h"
#include "distributed/data_parallel_trainer.h"
#include "distributed/deferred_all_reduce.h"
#include "distributed/gradient_all_reduce.h"
#include "runtime/collectives/communication_stream.h"
#include "runtime/collectives/setup.h"
#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "tests/common/test_util.h"
#include "training/losses.h"
#include "training/optimizer.h"

namespace grove::distributed {
namespace {

using compiler::ir::DType;
using compiler::ir::ValueId;
using runtime::Device;
using runtime::DeviceType;
using runtime::Tensor;

constexpr int64_t kRows = 4;
const Device kSim{DeviceType::kSim, 0};

// Four linear layers: the backward produces the last layer's gradients first,
// so the early buckets have several layers of backward left to overlap.
compiler::ir::Program deep_mlp(Device device, ValueId* loss) {
  compiler::ir::ProgramBuilder b("overlap_mlp", device);
  ValueId h = b.input("x", {kRows, 8});
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t out = layer == 3 ? 3 : 8;
    ValueId w = b.param(str_cat("fc", layer, ".weight"), {out, 8}, DType::kF32,
                        compiler::ir::normal_init(0.4, 30 + layer));
    ValueId bias = b.param(str_cat("fc", layer, ".bias"), {out}, DType::kF32,
                           compiler::ir::normal_init(0.1, 40 + layer));
    h = b.linear(h, w, bias, str_cat("fc", layer));
    if (layer < 3) h = b.tanh(h);
  }
  b.output(h);
  compiler::ir::Program model = b.build();
  *loss = training::add_mse_loss(model, model.outputs()[0]);
  return model;
}

std::vector<const compiler::ir::Node*> nodes_of(const compiler::ir::Program& program,
                                                const std::string& op) {
  std::vector<const compiler::ir::Node*> found;
  for (const compiler::ir::Node& node : program.nodes()) {
    if (node.op == op) found.push_back(&node);
  }
  return found;
}

// The captured sim graph, from its DOT text: node labels and dependencies.
struct CapturedGraph {
  std::vector<std::string> labels;
  std::vector<std::vector<size_t>> dependencies;

  static CapturedGraph parse(const std::string& dot) {
    CapturedGraph graph;
    std::regex node(R"re(^\s*n(\d+) \[label="\d+: (.*)"\];$)re");
    std::regex edge(R"(^\s*n(\d+) -> n(\d+);$)");
    std::istringstream lines(dot);
    std::string line;
    std::smatch match;
    while (std::getline(lines, line)) {
      if (std::regex_match(line, match, node)) {
        graph.labels.push_back(match[2]);
        graph.dependencies.emplace_back();
      } else if (std::regex_match(line, match, edge)) {
        graph.dependencies.at(std::stoul(match[2])).push_back(std::stoul(match[1]));
      }
    }
    return graph;
  }
  bool is_all_reduce(size_t node) const {
    return labels[node].find("grove_host_all_reduce") != std::string::npos;
  }
  // Whether `node` runs after `ancestor` in every execution (a path of edges).
  bool depends_on(size_t node, size_t ancestor) const {
    std::vector<size_t> pending = {node};
    std::vector<bool> seen(labels.size(), false);
    while (!pending.empty()) {
      size_t at = pending.back();
      pending.pop_back();
      if (at == ancestor) return true;
      if (seen[at]) continue;
      seen[at] = true;
      for (size_t d : dependencies[at]) pending.push_back(d);
    }
    return false;
  }
};

// One rank alone (world size 1: a host collective returns at once) captures
// its backward on a fresh stream and returns the graph.
CapturedGraph capture_backward(bool overlap, size_t* buckets) {
  runtime::collectives::join_local_group(kSim, 0, 1, str_cat("overlap.capture.", overlap),
                                         std::chrono::milliseconds(10000));
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  DataParallelOptions options;
  options.trainer.backend = "eager";
  options.all_reduce.bucket_bytes = 200;  // about one layer per bucket
  options.all_reduce.overlap = overlap;
  // Every bucket reduced in the backward, the one captured here.
  options.all_reduce.deferred_last_buckets = 0;
  DataParallelTrainer trainer(model, loss, options);
  EXPECT_EQ(trainer.overlaps_communication(), overlap);
  *buckets = trainer.buckets().outputs.size();
  GROVE_SEEDED_RNG(rng);
  Tensor x = Tensor::from_vector(testing::random_floats(rng, kRows * 8), {kRows, 8}, kSim);
  Tensor target = Tensor::from_vector(testing::random_floats(rng, kRows * 3), {kRows, 3}, kSim);
  compiler::TensorList args = trainer.backward_arguments({x, target});

  runtime::DeviceContext& context = runtime::device_context(kSim);
  runtime::StreamHandle stream = context.create_stream();
  runtime::PoolId pool = context.allocator().create_pool();
  runtime::GraphRecording recording(kSim);
  {
    runtime::StreamGuard guard(kSim, stream);
    recording.capture_begin(stream, pool);
    try {
      trainer.lowered_backward().function().call(args);
    } catch (...) {
      recording.abort_capture();
      throw;
    }
    recording.capture_end();  // throws when the side stream was left unjoined
  }
  EXPECT_FALSE(runtime::collectives::communication_stream(kSim).forked());
  CapturedGraph graph = CapturedGraph::parse(recording.dot());
  runtime::collectives::leave_group(kSim);
  return graph;
}

TEST(GradientAllReduce, OverlapMovesGradientCopiesUpAndEndsTheBackwardWithAJoin) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  GradientBuckets buckets;
  compiler::ir::Program backward =
      add_gradient_all_reduce(programs.backward, {.bucket_bytes = 200}, &buckets);
  std::vector<const compiler::ir::Node*> all_reduces = nodes_of(backward, "all_reduce");
  ASSERT_EQ(all_reduces.size(), buckets.outputs.size());
  ASSERT_GE(all_reduces.size(), 3u);
  for (const compiler::ir::Node* node : all_reduces) EXPECT_EQ(node->attrs.get_int("overlap"), 1);
  // The first bucket is enqueued with most of the backward still to run; the
  // last one at the end.
  EXPECT_GT(buckets.nodes_after.front(), 4);
  EXPECT_EQ(buckets.nodes_after.back(), 0);
  for (size_t b = 1; b < buckets.nodes_after.size(); ++b) {
    EXPECT_LE(buckets.nodes_after[b], buckets.nodes_after[b - 1]);
  }
  // The backward ends with the join, over every reduced gradient, and returns it.
  const compiler::ir::Node& last = backward.nodes().back();
  ASSERT_EQ(last.op, "collective_join");
  EXPECT_EQ(last.operands.size(), programs.params.size());
  for (ValueId output : backward.outputs()) {
    EXPECT_EQ(backward.value(output).producer, static_cast<int32_t>(backward.nodes().size() - 1));
  }

  compiler::ir::Program in_line =
      add_gradient_all_reduce(programs.backward, {.bucket_bytes = 200, .overlap = false});
  EXPECT_TRUE(nodes_of(in_line, "collective_join").empty());
  for (const compiler::ir::Node* node : nodes_of(in_line, "all_reduce")) {
    EXPECT_EQ(node->attrs.get_int("overlap"), 0);
  }
}

// Note [Last gradient bucket].
TEST(GradientAllReduce, LastBucketHoldsTheGradientsProducedLast) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  GradientBuckets plain;
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 400}, &plain);
  // fc0's weight (256 bytes) and bias (32 bytes) come last; 280 bytes of
  // tail take both, whatever their order, and nothing before them.
  GradientBuckets split;
  compiler::ir::Program backward = add_gradient_all_reduce(
      programs.backward, {.bucket_bytes = 400, .last_bucket_bytes = 280}, &split);
  ASSERT_GE(split.outputs.size(), 2u);
  EXPECT_EQ(split.bytes.back(), 256 + 32);
  EXPECT_EQ(split.outputs.back().size(), 2u);
  EXPECT_EQ(split.nodes_after.back(), 0);
  // The buckets before it are the plain plan over the earlier gradients.
  std::vector<size_t> plain_order, split_order;
  for (const auto& bucket : plain.outputs)
    plain_order.insert(plain_order.end(), bucket.begin(), bucket.end());
  for (const auto& bucket : split.outputs)
    split_order.insert(split_order.end(), bucket.begin(), bucket.end());
  EXPECT_EQ(split_order, plain_order);
  for (size_t b = 0; b + 1 < split.outputs.size(); ++b) {
    EXPECT_TRUE(b + 2 == split.outputs.size() || split.bytes[b] >= 400) << "bucket " << b;
  }
  EXPECT_EQ(nodes_of(backward, "all_reduce").size(), split.outputs.size());
  // A tail larger than every gradient makes one bucket; a negative one is refused.
  GradientBuckets all;
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 400, .last_bucket_bytes = 1 << 20},
                          &all);
  EXPECT_EQ(all.outputs.size(), 1u);
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.last_bucket_bytes = -1}), ConfigError);
}

// Note [First gradient bucket].
TEST(GradientAllReduce, FirstBucketClosesAtItsOwnSize) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  GradientBuckets plain, early;
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 600}, &plain);
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 600, .first_bucket_bytes = 100},
                          &early);
  // fc3 (96 + 12 bytes) comes first: the first bucket closes once it holds 100.
  ASSERT_GE(early.outputs.size(), 2u);
  EXPECT_GE(early.bytes.front(), 100);
  EXPECT_LT(early.bytes.front(), plain.bytes.front());
  EXPECT_GT(early.nodes_after.front(), plain.nodes_after.front());
  for (size_t b = 1; b + 1 < early.outputs.size(); ++b) EXPECT_GE(early.bytes[b], 600);
  std::vector<size_t> plain_order, early_order;
  for (const auto& bucket : plain.outputs) {
    plain_order.insert(plain_order.end(), bucket.begin(), bucket.end());
  }
  for (const auto& bucket : early.outputs) {
    early_order.insert(early_order.end(), bucket.begin(), bucket.end());
  }
  EXPECT_EQ(early_order, plain_order);
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.first_bucket_bytes = -1}), ConfigError);
}

TEST(GradientAllReduce, SmallLastBucketJoinsThePreviousOne) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  // A bucket size whose plain plan ends with a bucket of less than 64 bytes
  // (fc0's bias, 32 bytes, after fc0's weight closed the bucket before it).
  GradientBuckets plain;
  int64_t bucket_bytes = 0;
  for (int64_t size = 100; size <= 1000 && bucket_bytes == 0; size += 4) {
    add_gradient_all_reduce(programs.backward, {.bucket_bytes = size}, &plain);
    if (plain.outputs.size() >= 3 && plain.bytes.back() < 64) bucket_bytes = size;
  }
  ASSERT_GT(bucket_bytes, 0) << "no bucket size leaves a last bucket under 64 bytes";
  GradientBuckets merged;
  compiler::ir::Program backward = add_gradient_all_reduce(
      programs.backward, {.bucket_bytes = bucket_bytes, .min_last_bucket_bytes = 64}, &merged);
  ASSERT_EQ(merged.outputs.size(), plain.outputs.size() - 1);
  const size_t n = plain.outputs.size();
  EXPECT_EQ(merged.bytes.back(), plain.bytes[n - 2] + plain.bytes[n - 1]);
  EXPECT_EQ(merged.outputs.back().size(),
            plain.outputs[n - 2].size() + plain.outputs[n - 1].size());
  EXPECT_EQ(merged.nodes_after.back(), 0);  // after the last gradient's producer
  for (size_t b = 0; b + 1 < merged.outputs.size(); ++b) {
    EXPECT_EQ(merged.outputs[b], plain.outputs[b]) << "bucket " << b;
    EXPECT_EQ(merged.nodes_after[b], plain.nodes_after[b]) << "bucket " << b;
  }
  EXPECT_EQ(nodes_of(backward, "all_reduce").size(), merged.outputs.size());
  // A last bucket at the threshold stays; a single bucket has nothing to join.
  GradientBuckets kept;
  add_gradient_all_reduce(
      programs.backward,
      {.bucket_bytes = bucket_bytes, .min_last_bucket_bytes = plain.bytes.back()}, &kept);
  EXPECT_EQ(kept.outputs.size(), plain.outputs.size());
  GradientBuckets one;
  add_gradient_all_reduce(programs.backward,
                          {.bucket_bytes = 1 << 20, .min_last_bucket_bytes = 1 << 20}, &one);
  EXPECT_EQ(one.outputs.size(), 1u);
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.min_last_bucket_bytes = -1}),
               ConfigError);
}

// Note [Last buckets reduced in the optimizer step].
TEST(GradientAllReduce, DeferredBucketsAreLeftOutOfTheBackward) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  GradientBuckets plain, deferred;
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 200}, &plain);
  compiler::ir::Program backward = add_gradient_all_reduce(
      programs.backward, {.bucket_bytes = 200, .deferred_last_buckets = 1}, &deferred);
  ASSERT_GE(plain.outputs.size(), 3u);
  EXPECT_EQ(plain.deferred, 0u);
  EXPECT_EQ(deferred.deferred, 1u);
  EXPECT_EQ(deferred.outputs, plain.outputs);  // the same plan
  std::vector<const compiler::ir::Node*> all_reduces = nodes_of(backward, "all_reduce");
  ASSERT_EQ(all_reduces.size(), plain.outputs.size() - 1);
  // The join waits for the reduced buckets only; the last bucket's gradients
  // are returned as the backward wrote them (their copies into the buffers).
  const compiler::ir::Node& join = backward.nodes().back();
  ASSERT_EQ(join.op, "collective_join");
  EXPECT_EQ(join.operands.size(), programs.params.size() - plain.outputs.back().size());
  for (size_t output : plain.outputs.back()) {
    EXPECT_EQ(backward.node(backward.value(backward.outputs()[output]).producer).op, "copy_into");
  }
  // At least one bucket stays in the backward; deferring needs overlap.
  GradientBuckets all;
  add_gradient_all_reduce(programs.backward, {.bucket_bytes = 200, .deferred_last_buckets = 100},
                          &all);
  EXPECT_EQ(all.deferred, all.outputs.size() - 1);
  EXPECT_THROW(
      add_gradient_all_reduce(programs.backward, {.deferred_last_buckets = 1, .overlap = false}),
      ConfigError);
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.deferred_last_buckets = -1}),
               ConfigError);

  // The optimizer step: the deferred bucket's all_reduce first, the other
  // params' updates before the join, the deferred params' updates after it,
  // reading the joined gradients.
  training::OptimizerProgram sgd = training::build_optimizer_program(
      programs.forward, programs.params, training::OptimizerKind::kSgdMomentum);
  std::vector<std::string> names;
  for (size_t output : plain.outputs.back()) {
    const compiler::ir::Node& copy = programs.backward.node(
        programs.backward.value(programs.backward.outputs()[output]).producer);
    names.push_back(programs.backward.value(copy.operands.at(0)).name);
  }
  compiler::ir::Program step = add_deferred_all_reduce(sgd.program, {names}, {});
  ASSERT_EQ(step.inputs().size(), sgd.program.inputs().size());
  ASSERT_EQ(step.nodes().size(), sgd.program.nodes().size() + 2);
  EXPECT_EQ(step.nodes().front().op, "all_reduce");
  EXPECT_EQ(step.nodes().front().operands.size(), names.size());
  EXPECT_EQ(step.nodes().front().attrs.get_int("overlap"), 1);
  size_t join_at = 0;
  for (size_t n = 0; n < step.nodes().size(); ++n) {
    if (step.nodes()[n].op == "collective_join") join_at = n;
  }
  ASSERT_EQ(join_at, step.nodes().size() - 1 - names.size());
  std::set<std::string> deferred_names(names.begin(), names.end());
  for (size_t n = 1; n < step.nodes().size(); ++n) {
    if (n == join_at) continue;
    const compiler::ir::Node& update = step.nodes()[n];
    ASSERT_EQ(update.op, "sgd_momentum_update");
    const compiler::ir::Value& gradient = step.value(update.operands.at(1));
    const bool reads_deferred =
        gradient.producer >= 0 && step.node(gradient.producer).op == "collective_join";
    EXPECT_EQ(reads_deferred, n > join_at) << update.name;
    if (!reads_deferred) EXPECT_EQ(deferred_names.count(gradient.name), 0u) << update.name;
  }
  EXPECT_THROW(add_deferred_all_reduce(sgd.program, {{"grad.nothing"}}, {}), ConfigError);
  EXPECT_THROW(add_deferred_all_reduce(sgd.program, {names, names}, {}), ConfigError);
  // In line: the all_reduce first, no join, the updates in their order.
  compiler::ir::Program in_line = add_deferred_all_reduce(sgd.program, {names}, {.overlap = false});
  EXPECT_EQ(in_line.nodes().front().attrs.get_int("overlap"), 0);
  EXPECT_TRUE(nodes_of(in_line, "collective_join").empty());
}

TEST(GradientAllReduce, OverlapRejectsGradientsOutsidePersistentBuffers) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingOptions options;
  options.gradient_storage = compiler::autodiff::GradientStorage::kOutputs;
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss, options);
  try {
    add_gradient_all_reduce(programs.backward, {});
    FAIL() << "overlap over fresh gradient values was accepted";
  } catch (const ConfigError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("Note [Communication stream]"), std::string::npos) << message;
    EXPECT_NE(message.find("overlap = false"), std::string::npos) << message;
  }
  // In line, fresh gradient values are fine (they stay on the compute stream).
  EXPECT_NO_THROW(add_gradient_all_reduce(programs.backward, {.overlap = false}));
}

// The door's backward (python/grove/gradient_reduce.py) reduces only the
// outputs that are parameter gradients.
TEST(GradientAllReduce, ReducesOnlyTheChosenOutputsAndRefusesPositionsOutOfRange) {
  ValueId loss;
  compiler::ir::Program model = deep_mlp(kSim, &loss);
  compiler::autodiff::TrainingOptions options;
  options.gradient_storage = compiler::autodiff::GradientStorage::kOutputs;
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss, options);
  ASSERT_GE(programs.backward.outputs().size(), 3u);
  GradientBuckets buckets;
  compiler::ir::Program backward = add_gradient_all_reduce(
      programs.backward, {.bucket_bytes = 1, .overlap = false, .outputs = std::set<size_t>{0, 2}},
      &buckets);
  std::set<size_t> reduced;
  for (const std::vector<size_t>& bucket : buckets.outputs)
    reduced.insert(bucket.begin(), bucket.end());
  EXPECT_EQ(reduced, (std::set<size_t>{0, 2}));
  EXPECT_EQ(nodes_of(backward, "all_reduce").size(), 2u);  // bucket_bytes 1: one per gradient
  const size_t count = programs.backward.outputs().size();
  try {
    add_gradient_all_reduce(programs.backward,
                            {.overlap = false, .outputs = std::set<size_t>{count}});
    FAIL() << "an output position out of range was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("out of range"), std::string::npos) << error.what();
  }
}

TEST(CommunicationStream, JoinsOnlyIntoTheStreamItForkedFrom) {
  runtime::DeviceContext& context = runtime::device_context(kSim);
  runtime::StreamHandle compute = context.create_stream();
  runtime::StreamHandle other = context.create_stream();
  runtime::collectives::CommunicationStream& side =
      runtime::collectives::communication_stream(kSim);
  side.join_into(other);  // nothing forked: nothing to do
  side.fork_from(compute);
  EXPECT_TRUE(side.forked());
  EXPECT_THROW(side.join_into(other), Error);
  side.join_into(compute);
  EXPECT_FALSE(side.forked());
  EXPECT_THROW(side.fork_from(runtime::StreamHandle{}), Error);
  // A fork left unjoined (its step failed) does not block a fork from another stream.
  side.fork_from(compute);
  side.fork_from(other);
  side.join_into(other);
  EXPECT_FALSE(side.forked());
}

TEST(CommunicationStream, CapturedAllReducesRunOnABranchParallelToTheRemainingBackward) {
  size_t buckets = 0;
  CapturedGraph graph = capture_backward(/*overlap=*/true, &buckets);
  std::vector<size_t> all_reduces;
  for (size_t n = 0; n < graph.labels.size(); ++n) {
    if (graph.is_all_reduce(n)) all_reduces.push_back(n);
  }
  ASSERT_EQ(all_reduces.size(), buckets);
  ASSERT_GE(all_reduces.size(), 3u);
  // Backward work captured after the first all-reduce: none of it waits for
  // any all-reduce, so the collectives run beside it.
  size_t later_compute = 0;
  for (size_t n = all_reduces.front() + 1; n < graph.labels.size(); ++n) {
    if (graph.is_all_reduce(n)) continue;
    ++later_compute;
    for (size_t a : all_reduces) {
      EXPECT_FALSE(graph.depends_on(n, a)) << graph.labels[n] << " waits for all_reduce node " << a;
    }
  }
  EXPECT_GE(later_compute, 4u);
  // The side stream runs the collectives in order (every rank issues them in
  // the same order), each after the backward work that made its bucket.
  for (size_t i = 0; i < all_reduces.size(); ++i) {
    EXPECT_FALSE(graph.dependencies[all_reduces[i]].empty());
    if (i > 0) {
      EXPECT_TRUE(graph.depends_on(all_reduces[i], all_reduces[i - 1]));
    }
  }
}

TEST(CommunicationStream, InLineAllReducesSerializeTheRemainingBackward) {
  size_t buckets = 0;
  CapturedGraph graph = capture_backward(/*overlap=*/false, &buckets);
  size_t first = graph.labels.size();
  for (size_t n = 0; n < graph.labels.size() && first == graph.labels.size(); ++n) {
    if (graph.is_all_reduce(n)) first = n;
  }
  ASSERT_LT(first, graph.labels.size());
  ASSERT_GE(buckets, 3u);
  for (size_t n = first + 1; n < graph.labels.size(); ++n) {
    EXPECT_TRUE(graph.depends_on(n, first)) << graph.labels[n];
  }
}

}  // namespace
}  // namespace grove::distributed
