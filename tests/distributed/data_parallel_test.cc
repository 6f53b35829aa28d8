// Data-parallel training (issue #10) on two ranks that are threads of this
// process: on sim (always; ranks on sim:0 and sim:1, host collectives) and on
// cuda (NCCL; skipped with "needs 2 CUDA devices" on smaller machines).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "compiler/backends/backend_stats_json.h"
#include "compiler/ir/builder.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "distributed/data_parallel_trainer.h"
#include "runtime/collectives/communication_stream.h"
#include "runtime/collectives/host_communicator.h"
#include "runtime/collectives/setup.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/device_context.h"
#include "tests/common/test_util.h"
#include "training/losses.h"
#include "training/trainer.h"

namespace grove::distributed {
namespace {

using compiler::ir::DType;
using compiler::ir::ValueId;
using runtime::Device;
using runtime::DeviceType;
using runtime::Tensor;
using runtime::collectives::CommunicationError;
using training::Hyperparameters;
using training::OptimizerKind;

constexpr int kWorld = 2;
constexpr int64_t kShard = 4;  // rows per rank
constexpr int kSteps = 5;

compiler::ir::Program mlp(Device device, int64_t batch, ValueId* loss) {
  compiler::ir::ProgramBuilder b("dp_mlp", device);
  ValueId x = b.input("x", {batch, 12});
  ValueId w1 = b.param("fc1.weight", {16, 12}, DType::kF32, compiler::ir::normal_init(0.4, 11));
  ValueId b1 = b.param("fc1.bias", {16}, DType::kF32, compiler::ir::normal_init(0.1, 12));
  ValueId w2 = b.param("fc2.weight", {16, 16}, DType::kF32, compiler::ir::normal_init(0.3, 13));
  ValueId w3 = b.param("fc3.weight", {5, 16}, DType::kF32, compiler::ir::normal_init(0.3, 14));
  ValueId b3 = b.param("fc3.bias", {5}, DType::kF32, compiler::ir::normal_init(0.1, 15));
  ValueId h = b.gelu(b.linear(x, w1, b1, "fc1"));
  h = b.tanh(b.linear(h, w2, compiler::ir::kNoValue, "fc2"));
  b.output(b.linear(h, w3, b3, "fc3"));
  compiler::ir::Program model = b.build();
  *loss = training::add_mse_loss(model, model.outputs()[0]);
  return model;
}

// Per step: the whole batch (x [world * shard, 12], target [world * shard, 5]).
struct Batches {
  std::vector<std::vector<float>> x, target;
};

Batches random_batches(std::mt19937& rng) {
  Batches batches;
  for (int step = 0; step < kSteps; ++step) {
    batches.x.push_back(testing::random_floats(rng, kWorld * kShard * 12, -1.5f, 1.5f));
    batches.target.push_back(testing::random_floats(rng, kWorld * kShard * 5, -1.0f, 1.0f));
  }
  return batches;
}

std::vector<float> rows(const std::vector<float>& all, int64_t width, int64_t first,
                        int64_t count) {
  return {all.begin() + first * width, all.begin() + (first + count) * width};
}

using Params = std::map<std::string, std::vector<float>>;

Params params_of(const std::function<const Tensor&(const std::string&)>& state) {
  Params params;
  for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc3.weight", "fc3.bias"}) {
    params[name] = state(name).to_vector<float>();
  }
  return params;
}

// Single-device training on the concatenated batch.
Params train_single(Device device, const Batches& batches, OptimizerKind optimizer,
                    const Hyperparameters& hyper) {
  ValueId loss;
  compiler::ir::Program model = mlp(device, kWorld * kShard, &loss);
  training::Trainer trainer(model, loss, {.backend = "eager", .optimizer = optimizer});
  for (int step = 0; step < kSteps; ++step) {
    trainer.step({Tensor::from_vector(batches.x[step], {kWorld * kShard, 12}, device),
                  Tensor::from_vector(batches.target[step], {kWorld * kShard, 5}, device)},
                 hyper);
  }
  return params_of([&](const std::string& name) -> const Tensor& { return trainer.state(name); });
}

struct RankResult {
  Params params;
  std::vector<float> losses;
  bool backward_captured = false;  // the backward's all_reduce ran inside a replayed graph
  bool overlapped = false;         // the trainer ran its all-reduces on the side stream
  int64_t forks = 0;               // forks onto the rank's communication stream
  size_t buckets = 0;
  size_t deferred = 0;            // buckets the optimizer step reduces
  int optimizer_all_reduces = 0;  // all_reduce nodes of the optimizer stage
  // Per bucket with more than one gradient buffer: whether each buffer starts
  // in the storage of the one before it, where that one's bytes end (rounded
  // up to kStateAlignmentBytes): Note [Gradient bucket in one buffer].
  std::vector<bool> back_to_back;
  std::string stats;  // the rank's tree statistics (cudagraphs)
  std::exception_ptr error;
};

// Runs `world` ranks as threads on `devices[r]`, training on their shards.
std::vector<RankResult> train_data_parallel(const std::vector<Device>& devices,
                                            const std::string& backend, const std::string& group,
                                            const Batches& batches, OptimizerKind optimizer,
                                            const Hyperparameters& hyper, bool overlap = true,
                                            bool contiguous = true, int deferred = 0) {
  std::vector<RankResult> results(devices.size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < static_cast<int>(devices.size()); ++rank) {
    threads.emplace_back([&, rank] {
      const Device device = devices[static_cast<size_t>(rank)];
      RankResult& result = results[static_cast<size_t>(rank)];
      try {
        runtime::collectives::join_local_group(device, rank, static_cast<int>(devices.size()),
                                               group, std::chrono::milliseconds(60000));
        ValueId loss;
        compiler::ir::Program model = mlp(device, kShard, &loss);
        DataParallelOptions options;
        options.trainer.backend = backend;
        options.trainer.optimizer = optimizer;
        options.all_reduce.bucket_bytes = 600;  // several buckets for this small model
        options.all_reduce.overlap = overlap;
        options.contiguous_buckets = contiguous;
        options.all_reduce.deferred_last_buckets = deferred;
        DataParallelTrainer trainer(model, loss, options);
        result.deferred = trainer.buckets().deferred;
        for (const compiler::ir::Node& node : trainer.trainer().optimizer_stage().program().nodes())
          result.optimizer_all_reduces += node.op == "all_reduce" ? 1 : 0;
        result.overlapped = trainer.overlaps_communication();
        result.buckets = trainer.buckets().outputs.size();
        const compiler::ir::Program& backward = trainer.trainer().programs().backward;
        for (const std::vector<size_t>& bucket : trainer.buckets().outputs) {
          if (bucket.size() < 2) continue;
          bool adjacent = true;
          const Tensor* previous = nullptr;
          for (size_t output : bucket) {
            const compiler::ir::Node& copy =
                backward.node(backward.value(backward.outputs()[output]).producer);
            const Tensor& buffer = trainer.state(backward.value(copy.operands.at(0)).name);
            if (previous != nullptr) {
              const auto padded = (previous->nbytes() + training::kStateAlignmentBytes - 1) /
                                  training::kStateAlignmentBytes * training::kStateAlignmentBytes;
              adjacent = adjacent && buffer.storage() == previous->storage() &&
                         static_cast<const char*>(buffer.address()) ==
                             static_cast<const char*>(previous->address()) + padded;
            }
            previous = &buffer;
          }
          result.back_to_back.push_back(adjacent);
        }
        const int64_t forks_before =
            runtime::collectives::communication_stream(device).fork_count();
        for (int step = 0; step < kSteps; ++step) {
          Tensor x = Tensor::from_vector(rows(batches.x[step], 12, rank * kShard, kShard),
                                         {kShard, 12}, device);
          Tensor target = Tensor::from_vector(rows(batches.target[step], 5, rank * kShard, kShard),
                                              {kShard, 5}, device);
          result.losses.push_back(trainer.step({x, target}, hyper).to_vector<float>()[0]);
        }
        result.params = params_of(
            [&](const std::string& name) -> const Tensor& { return trainer.state(name); });
        result.forks =
            runtime::collectives::communication_stream(device).fork_count() - forks_before;
        if (backend == "cudagraphs") {
          nlohmann::json stats = grove::compiler::backends::tree_json(
              cudagraph_trees::tree_manager_for(device).stats());
          // Every call after the warm-up and recording of each stage replays,
          // and nothing fell back to eager: the collectives were captured.
          result.backward_captured = stats["replays"].get<int64_t>() >= 3 * (kSteps - 2) &&
                                     stats["capture_failures"].get<int64_t>() == 0 &&
                                     stats["eager_calls"].get<int64_t>() == 0;
          result.stats = stats.dump();
        }
      } catch (...) {
        result.error = std::current_exception();
      }
      cudagraph_trees::reset_tree_managers();
      runtime::collectives::leave_group(device);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (RankResult& result : results) {
    if (result.error) std::rethrow_exception(result.error);
  }
  return results;
}

void expect_near_params(const Params& got, const Params& expected, const std::string& what) {
  for (const auto& [name, values] : expected) {
    const std::vector<float>& other = got.at(name);
    ASSERT_EQ(other.size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(other[i], values[i], 2e-5 + 2e-4 * std::abs(values[i]))
          << what << ": " << name << "[" << i << "]";
    }
  }
}

void expect_bitwise_params(const Params& got, const Params& expected, const std::string& what) {
  for (const auto& [name, values] : expected) {
    const std::vector<float>& other = got.at(name);
    ASSERT_EQ(other.size(), values.size()) << name;
    EXPECT_EQ(std::memcmp(other.data(), values.data(), values.size() * sizeof(float)), 0)
        << what << ": " << name;
  }
}

class DataParallel : public ::testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override {
    cudagraph_trees::backend::register_cudagraphs_backend();
    if (GetParam() == DeviceType::kCuda) {
      int count = runtime::cuda_device_count();
      if (count < kWorld) GTEST_SKIP() << "needs 2 CUDA devices (found " << count << ")";
      if (!runtime::collectives::nccl_available()) GTEST_SKIP() << "needs libnccl.so.2";
    }
  }
  std::vector<Device> rank_devices() const { return {{GetParam(), 0}, {GetParam(), 1}}; }
  std::string group(const std::string& test) const {
    return test + (GetParam() == DeviceType::kCuda ? ".cuda" : ".sim");
  }
};

TEST_P(DataParallel, TwoRanksMatchSingleRankOnTheConcatenatedBatchForFiveSteps) {
  GROVE_SEEDED_RNG(rng);
  Batches batches = random_batches(rng);
  for (OptimizerKind optimizer : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(training::optimizer_kind_name(optimizer));
    Hyperparameters hyper;
    hyper.lr = optimizer == OptimizerKind::kAdamW ? 1e-3 : 0.05;
    hyper.weight_decay = 0.01;
    Params single = train_single(rank_devices()[0], batches, optimizer, hyper);
    std::vector<RankResult> ranks = train_data_parallel(
        rank_devices(), "eager", group(str_cat("match.", training::optimizer_kind_name(optimizer))),
        batches, optimizer, hyper);
    expect_bitwise_params(ranks[1].params, ranks[0].params, "rank 1 vs rank 0");
    expect_near_params(ranks[0].params, single, "data parallel vs single rank");
    // The params moved: the comparison is not trivially between initial values.
    ValueId loss;
    compiler::ir::Program initial = mlp(rank_devices()[0], kShard, &loss);
    training::Trainer untouched(initial, loss, {.backend = "eager"});
    EXPECT_NE(untouched.state("fc1.weight").to_vector<float>(), single.at("fc1.weight"));
  }
}

// Overlap is the default; the in-line run (all-reduces on the compute stream)
// is the reference: the same kernels and collectives, only on other streams.
TEST_P(DataParallel, OverlappedAndCapturedStepsEqualInLineEagerStepsBitwise) {
  GROVE_SEEDED_RNG(rng);
  Batches batches = random_batches(rng);
  Hyperparameters hyper;
  hyper.lr = 1e-3;
  std::vector<RankResult> in_line =
      train_data_parallel(rank_devices(), "eager", group("bitwise.in_line"), batches,
                          OptimizerKind::kAdamW, hyper, /*overlap=*/false);
  std::vector<RankResult> eager = train_data_parallel(
      rank_devices(), "eager", group("bitwise.eager"), batches, OptimizerKind::kAdamW, hyper);
  std::vector<RankResult> graphs = train_data_parallel(
      rank_devices(), "cudagraphs", group("bitwise.graphs"), batches, OptimizerKind::kAdamW, hyper);
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(str_cat("rank ", rank));
    EXPECT_FALSE(in_line[rank].overlapped);
    EXPECT_EQ(in_line[rank].forks, 0);
    EXPECT_TRUE(eager[rank].overlapped);
    EXPECT_TRUE(graphs[rank].overlapped);
    ASSERT_GE(eager[rank].buckets, 2u);
    // Every bucket of every eager step forked onto the communication stream.
    EXPECT_EQ(eager[rank].forks, static_cast<int64_t>(kSteps * eager[rank].buckets));
    EXPECT_EQ(eager[rank].losses, in_line[rank].losses);
    expect_bitwise_params(eager[rank].params, in_line[rank].params, "overlapped vs in line");
    EXPECT_EQ(graphs[rank].losses, in_line[rank].losses);
    expect_bitwise_params(graphs[rank].params, in_line[rank].params, "cudagraphs vs in line");
    EXPECT_TRUE(graphs[rank].backward_captured) << graphs[rank].stats;
  }
}

// Note [Gradient bucket in one buffer] and Note [Adjacent buffers reduce as
// one]: the default layout trains exactly like one buffer per gradient.
TEST_P(DataParallel, BucketBuffersLieBackToBackAndTrainLikeSeparateBuffersBitwise) {
  GROVE_SEEDED_RNG(rng);
  Batches batches = random_batches(rng);
  Hyperparameters hyper;
  hyper.lr = 1e-3;
  std::vector<RankResult> separate =
      train_data_parallel(rank_devices(), "cudagraphs", group("layout.separate"), batches,
                          OptimizerKind::kAdamW, hyper, /*overlap=*/true, /*contiguous=*/false);
  std::vector<RankResult> flat =
      train_data_parallel(rank_devices(), "cudagraphs", group("layout.flat"), batches,
                          OptimizerKind::kAdamW, hyper, /*overlap=*/true, /*contiguous=*/true);
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(str_cat("rank ", rank));
    ASSERT_FALSE(flat[rank].back_to_back.empty());
    for (bool adjacent : flat[rank].back_to_back) EXPECT_TRUE(adjacent);
    // One buffer per gradient: the caching allocator's blocks, not one storage.
    EXPECT_NE(separate[rank].back_to_back,
              std::vector<bool>(separate[rank].back_to_back.size(), true));
    EXPECT_TRUE(flat[rank].backward_captured) << flat[rank].stats;
    EXPECT_EQ(flat[rank].losses, separate[rank].losses);
    expect_bitwise_params(flat[rank].params, separate[rank].params, "flat vs separate buffers");
  }
}

// Note [Last buckets reduced in the optimizer step]: the last bucket reduced
// by the optimizer step trains exactly like the plain plan, captured.
TEST_P(DataParallel, DeferredBucketsReduceInTheOptimizerStepAndTrainAlikeBitwise) {
  GROVE_SEEDED_RNG(rng);
  Batches batches = random_batches(rng);
  Hyperparameters hyper;
  hyper.lr = 0.05;
  std::vector<RankResult> plain = train_data_parallel(
      rank_devices(), "cudagraphs", group("deferred.plain"), batches, OptimizerKind::kSgdMomentum,
      hyper, /*overlap=*/true, /*contiguous=*/true, /*deferred=*/0);
  std::vector<RankResult> deferred = train_data_parallel(
      rank_devices(), "cudagraphs", group("deferred.one"), batches, OptimizerKind::kSgdMomentum,
      hyper, /*overlap=*/true, /*contiguous=*/true, /*deferred=*/1);
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(str_cat("rank ", rank));
    EXPECT_EQ(plain[rank].deferred, 0u);
    EXPECT_EQ(plain[rank].optimizer_all_reduces, 0);
    EXPECT_EQ(deferred[rank].deferred, 1u);
    EXPECT_EQ(deferred[rank].optimizer_all_reduces, 1);
    EXPECT_EQ(deferred[rank].buckets, plain[rank].buckets);
    EXPECT_TRUE(deferred[rank].overlapped);
    EXPECT_TRUE(deferred[rank].backward_captured) << deferred[rank].stats;
    EXPECT_EQ(deferred[rank].losses, plain[rank].losses);
    expect_bitwise_params(deferred[rank].params, plain[rank].params, "deferred vs plain");
  }
  expect_bitwise_params(deferred[1].params, deferred[0].params, "rank 1 vs rank 0");
}

TEST_P(DataParallel, MissingRankTimesOutWithAClearError) {
  if (GetParam() == DeviceType::kCuda) {
    // NCCL: joining a group whose rank 1 never comes times out in set-up.
    Device device{DeviceType::kCuda, 0};
    try {
      runtime::collectives::join_local_group(device, 0, kWorld, group("missing"),
                                             std::chrono::milliseconds(3000));
      FAIL() << "joining without rank 1 did not time out";
    } catch (const CommunicationError& error) {
      EXPECT_NE(std::string(error.what()).find("waited 3000 ms"), std::string::npos)
          << error.what();
    }
    return;
  }
  Device device{DeviceType::kSim, 0};
  runtime::collectives::join_local_group(device, 0, kWorld, group("missing"),
                                         std::chrono::milliseconds(200));
  ValueId loss;
  compiler::ir::Program model = mlp(device, kShard, &loss);
  DataParallelTrainer trainer(model, loss, {});
  GROVE_SEEDED_RNG(rng);
  Tensor x = Tensor::from_vector(testing::random_floats(rng, kShard * 12), {kShard, 12}, device);
  Tensor target = Tensor::from_vector(testing::random_floats(rng, kShard * 5), {kShard, 5}, device);
  auto start = std::chrono::steady_clock::now();
  try {
    trainer.step({x, target}, {});
    FAIL() << "a step without rank 1 did not fail";
  } catch (const CommunicationError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("rank(s) 1, which never arrived"), std::string::npos) << message;
    EXPECT_NE(message.find("waited 200 ms"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The group stays failed: the next collective fails at once with the same message.
  EXPECT_THROW(trainer.step({x, target}, {}), CommunicationError);
  runtime::collectives::leave_group(device);
}

// Note [Communicators captured by graphs are never destroyed]: each rank
// replaces its communicator (joins a second group) while the first trainer's
// captured graphs, which hold that group's all-reduces, are alive. NCCL's
// ncclCommDestroy of the first group would wait for those graphs forever; the
// second group then trains as the first did, and the first trainer's graphs
// still replay over their own group. A watchdog turns a hang into a failure.
TEST_P(DataParallel, ReplacingTheGroupWhileItsCapturedGraphsLiveFinishes) {
  GROVE_SEEDED_RNG(rng);
  Batches batches = random_batches(rng);
  Hyperparameters hyper;
  hyper.lr = 1e-3;
  std::atomic<bool> finished{false};
  std::thread watchdog([&finished] {
    for (int tenth = 0; tenth < 1800 && !finished.load(); ++tenth) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!finished.load()) {
      std::fprintf(stderr,
                   "DataParallel.ReplacingTheGroupWhileItsCapturedGraphsLiveFinishes: "
                   "a rank hung for 180 s replacing its communicator\n");
      std::_Exit(1);
    }
  });
  const std::vector<Device> devices = rank_devices();
  std::vector<std::vector<float>> first(kWorld), second(kWorld), again(kWorld);
  std::vector<Params> kept_params(kWorld);
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      const Device device = devices[static_cast<size_t>(rank)];
      try {
        auto train = [&](const std::string& name, std::vector<float>& losses) {
          runtime::collectives::join_local_group(device, rank, kWorld, group(name),
                                                 std::chrono::milliseconds(60000));
          ValueId loss;
          DataParallelOptions options;
          options.trainer.backend = "cudagraphs";
          options.all_reduce.bucket_bytes = 600;
          auto trainer =
              std::make_unique<DataParallelTrainer>(mlp(device, kShard, &loss), loss, options);
          for (int step = 0; step < kSteps; ++step) {
            Tensor x = Tensor::from_vector(rows(batches.x[step], 12, rank * kShard, kShard),
                                           {kShard, 12}, device);
            Tensor target = Tensor::from_vector(
                rows(batches.target[step], 5, rank * kShard, kShard), {kShard, 5}, device);
            losses.push_back(trainer->step({x, target}, hyper).to_vector<float>()[0]);
          }
          return trainer;
        };
        auto kept = train("replaced.first", first[static_cast<size_t>(rank)]);
        auto replacing = train("replaced.second", second[static_cast<size_t>(rank)]);
        // The first trainer's graphs replay over the group they captured.
        Tensor x = Tensor::from_vector(rows(batches.x[0], 12, rank * kShard, kShard), {kShard, 12},
                                       device);
        Tensor target = Tensor::from_vector(rows(batches.target[0], 5, rank * kShard, kShard),
                                            {kShard, 5}, device);
        again[static_cast<size_t>(rank)] = kept->step({x, target}, hyper).to_vector<float>();
        kept_params[static_cast<size_t>(rank)] =
            params_of([&](const std::string& name) -> const Tensor& { return kept->state(name); });
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
      cudagraph_trees::reset_tree_managers();
      runtime::collectives::leave_group(device);
    });
  }
  for (std::thread& thread : threads) thread.join();
  finished.store(true);
  watchdog.join();
  for (std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(str_cat("rank ", rank));
    // The same model, shard and seeds: the second group trains as the first.
    ASSERT_EQ(first[rank].size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(second[rank], first[rank]);
    ASSERT_EQ(again[rank].size(), 1u);
    EXPECT_TRUE(std::isfinite(again[rank][0]));
  }
  // The first trainer's last step averaged its gradients over its own group.
  expect_bitwise_params(kept_params[1], kept_params[0], "first trainer, rank 1 vs rank 0");
}

INSTANTIATE_TEST_SUITE_P(Devices, DataParallel,
                         ::testing::Values(DeviceType::kSim, DeviceType::kCuda),
                         [](const ::testing::TestParamInfo<DeviceType>& info) {
                           return std::string(runtime::device_type_name(info.param));
                         });

}  // namespace
}  // namespace grove::distributed
