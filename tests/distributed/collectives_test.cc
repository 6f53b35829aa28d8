// The host communicator (ranks as threads meeting at a rendezvous) and the
// backward rewrite that inserts bucketed gradient all-reduces.
#include <gtest/gtest.h>

#include <thread>

#include "compiler/autodiff/training_programs.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "distributed/gradient_all_reduce.h"
#include "runtime/collectives/host_communicator.h"
#include "runtime/collectives/setup.h"
#include "runtime/device_context.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"
#include "training/losses.h"

namespace grove::runtime::collectives {
namespace {

// Runs fn(rank) on `world` threads and rethrows the first failure.
void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

TEST(HostCommunicator, ThreeRanksSumAndMeanSeveralBuffersInOneCollective) {
  constexpr int kWorld = 3;
  GROVE_SEEDED_RNG(rng);
  std::vector<std::vector<float>> a, b;
  std::vector<std::vector<int64_t>> c;
  for (int r = 0; r < kWorld; ++r) {
    a.push_back(grove::testing::random_floats(rng, 37));
    b.push_back(grove::testing::random_floats(rng, 5));
    c.push_back(grove::testing::random_ints(rng, 7, -50, 50));
  }
  std::vector<std::vector<float>> got_a(kWorld), got_b(kWorld);
  std::vector<std::vector<int64_t>> got_c(kWorld);
  run_ranks(kWorld, [&](int rank) {
    Device device{DeviceType::kSim, rank};
    auto communicator =
        join_local_group(device, rank, kWorld, "host.sum_mean", std::chrono::milliseconds(30000));
    EXPECT_EQ(communicator->world_size(), kWorld);
    EXPECT_EQ(communicator->kind(), "host");
    Tensor ta = Tensor::from_vector(a[rank], {37}, device);
    Tensor tb = Tensor::from_vector(b[rank], {5}, device);
    Tensor tc = Tensor::from_vector(c[rank], {7}, device);
    StreamHandle stream = device_context(device).current_stream();
    communicator->all_reduce({{ta.data_ptr(), 37, DType::kF32}, {tc.data_ptr(), 7, DType::kI64}},
                             ReduceOp::kSum, stream);
    communicator->all_reduce({{tb.data_ptr(), 5, DType::kF32}}, ReduceOp::kMean, stream);
    got_a[rank] = ta.to_vector<float>();
    got_b[rank] = tb.to_vector<float>();
    got_c[rank] = tc.to_vector<int64_t>();
    leave_group(device);
  });
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < 37; ++i) {
      double sum = double{a[0][i]} + a[1][i] + a[2][i];
      EXPECT_EQ(got_a[r][i], static_cast<float>(sum)) << "rank " << r << " a[" << i << "]";
    }
    for (size_t i = 0; i < 5; ++i) {
      double mean = (double{b[0][i]} + b[1][i] + b[2][i]) / 3;
      EXPECT_EQ(got_b[r][i], static_cast<float>(mean)) << "rank " << r << " b[" << i << "]";
    }
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(got_c[r][i], c[0][i] + c[1][i] + c[2][i]);
  }
}

TEST(HostCommunicator, MismatchedBucketsAcrossRanksAreAnError) {
  std::vector<std::string> messages(2);
  GROVE_SEEDED_RNG(rng);
  std::vector<float> values = grove::testing::random_floats(rng, 8);
  run_ranks(2, [&](int rank) {
    Device device{DeviceType::kSim, rank};
    auto communicator =
        join_local_group(device, rank, 2, "host.mismatch", std::chrono::milliseconds(30000));
    Tensor t = Tensor::from_vector(values, {8}, device);
    try {
      communicator->all_reduce({{t.data_ptr(), rank == 0 ? 8 : 4, DType::kF32}}, ReduceOp::kSum,
                               device_context(device).current_stream());
    } catch (const CommunicationError& error) {
      messages[static_cast<size_t>(rank)] = error.what();
    }
    leave_group(device);
  });
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("every rank must reduce buffers of the same shapes"), std::string::npos)
        << message;
  }
}

TEST(Collectives, AdjacentBuffersCoalesceIntoOne) {
  // Runs that touch merge (Note [Adjacent buffers reduce as one]); a gap, a
  // dtype change or an earlier address starts a new buffer.
  alignas(16) static float storage[64];
  alignas(16) static int32_t ints[8];
  std::vector<Buffer> merged = coalesce_adjacent({{storage, 10, DType::kF32},
                                                  {storage + 10, 6, DType::kF32},
                                                  {storage + 16, 16, DType::kF32},
                                                  {storage + 40, 8, DType::kF32},
                                                  {ints, 8, DType::kI32},
                                                  {storage, 4, DType::kF32}});
  ASSERT_EQ(merged.size(), 4u);
  EXPECT_EQ(merged[0].data, storage);
  EXPECT_EQ(merged[0].count, 32);
  EXPECT_EQ(merged[1].data, storage + 40);
  EXPECT_EQ(merged[1].count, 8);
  EXPECT_EQ(merged[2].dtype, DType::kI32);
  EXPECT_EQ(merged[3].data, storage);
  EXPECT_EQ(merged[3].count, 4);
  // Same bytes, other dtype: not merged (an f32 then an i32 span that touch).
  std::vector<Buffer> mixed =
      coalesce_adjacent({{storage, 8, DType::kF32}, {storage + 8, 8, DType::kI32}});
  EXPECT_EQ(mixed.size(), 2u);
  EXPECT_TRUE(coalesce_adjacent({}).empty());
}

TEST(Collectives, AllReduceWithoutACommunicatorNamesTheDevice) {
  Device device{DeviceType::kSim, 7};
  try {
    communicator_for(device);
    FAIL() << "expected CommunicationError";
  } catch (const CommunicationError& error) {
    EXPECT_NE(std::string(error.what()).find("no communicator for sim:7"), std::string::npos)
        << error.what();
  }
}

TEST(Collectives, RankConfigFromEnvironmentNamesTheMissingVariable) {
  unsetenv("GROVE_RANK");
  setenv("GROVE_WORLD_SIZE", "2", 1);
  try {
    RankConfig::from_environment();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("GROVE_RANK is not set"), std::string::npos);
  }
  setenv("GROVE_RANK", "2", 1);
  setenv("GROVE_NCCL_ID_FILE", "/tmp/grove_unused.id", 1);
  EXPECT_THROW(RankConfig::from_environment(), ConfigError);  // rank 2 of world size 2
  setenv("GROVE_RANK", "1", 1);
  RankConfig config = RankConfig::from_environment();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 2);
  EXPECT_EQ(config.id_file, "/tmp/grove_unused.id");
  unsetenv("GROVE_RANK");
  unsetenv("GROVE_WORLD_SIZE");
  unsetenv("GROVE_NCCL_ID_FILE");
}

TEST(Collectives, FileRankWaitsForRankZerosIdFileThenTimesOut) {
  std::string path = ::testing::TempDir() + "/grove_never_written.id";
  std::remove(path.c_str());
  RankConfig config{1, 2, path, std::chrono::milliseconds(100)};
  // On sim the id file only names the group; a cuda rank would wait for it.
  auto communicator = join_group(Device{DeviceType::kSim, 5}, config);
  EXPECT_EQ(communicator->rank(), 1);
  leave_group(Device{DeviceType::kSim, 5});
}

}  // namespace
}  // namespace grove::runtime::collectives

namespace grove::distributed {
namespace {

TEST(GradientAllReduce, BucketsFollowProductionOrderAndStayCapturable) {
  compiler::ir::ProgramBuilder b("buckets", runtime::kSimDevice);
  compiler::ir::ValueId x = b.input("x", {2, 8});
  compiler::ir::ValueId h = x;
  for (int layer = 0; layer < 4; ++layer) {
    compiler::ir::ValueId w =
        b.param(str_cat("w", layer), {8, 8}, runtime::DType::kF32,
                compiler::ir::normal_init(0.3, static_cast<uint64_t>(layer + 1)));
    h = b.tanh(b.linear(h, w, compiler::ir::kNoValue, str_cat("fc", layer)));
  }
  b.output(h);
  compiler::ir::Program model = b.build();
  compiler::ir::ValueId loss = training::add_mse_loss(model, model.outputs()[0]);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model, loss);
  GradientBuckets buckets;
  compiler::ir::Program backward =
      add_gradient_all_reduce(programs.backward, {.bucket_bytes = 512}, &buckets);
  // Four 256-byte gradients, two per bucket.
  ASSERT_EQ(buckets.outputs.size(), 2u);
  EXPECT_EQ(buckets.bytes, (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(backward.outputs().size(), programs.backward.outputs().size());
  int reduces = 0;
  int first_reduce = -1;
  for (size_t n = 0; n < backward.nodes().size(); ++n) {
    if (backward.nodes()[n].op != "all_reduce") continue;
    if (first_reduce < 0) first_reduce = static_cast<int>(n);
    EXPECT_EQ(backward.nodes()[n].operands.size(), 2u);
    ++reduces;
  }
  EXPECT_EQ(reduces, 2);
  // The first bucket's collective comes before the end of the backward.
  EXPECT_LT(first_reduce, static_cast<int>(backward.nodes().size()) - 1) << backward.str();
  compiler::lowering::LoweredProgram lowered =
      compiler::lowering::lower(backward, {compiler::ops::ExecMode::kTraining});
  for (const compiler::Segment& segment : lowered.function().segments) {
    EXPECT_TRUE(segment.capturable()) << lowered.describe();
  }
  EXPECT_NE(lowered.describe().find("host all_reduce"), std::string::npos) << lowered.describe();
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.bucket_bytes = 0}), ConfigError);
  EXPECT_THROW(add_gradient_all_reduce(programs.backward, {.reduce_op = "max"}), Error);
}

}  // namespace
}  // namespace grove::distributed
