// Stream capture through the Platform interface, run on every device: capture
// records instead of running, replay reads current memory, each capture
// violation invalidates the capture and leaves the stream usable, capture
// modes, and fork/join across streams with events.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/testing/test_kernels.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::random_floats;

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

class CaptureTest : public ::grove::testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    context_ = &device_context(device());
    stream_ = context_->create_stream();
    guard_ = std::make_unique<StreamGuard>(device(), stream_);
    pool_ = allocator().create_pool();
  }
  void TearDown() override {
    if (context_ == nullptr) return;
    if (platform().capture_status(stream_) != CaptureStatus::kNone) {
      try {
        end();
      } catch (const Error&) {
      }
    }
    guard_.reset();
    allocator().release_pool(pool_);
  }

  Platform& platform() { return context_->platform(); }
  CachingAllocator& allocator() { return context_->allocator(); }

  void begin(CaptureMode mode = CaptureMode::kThreadLocal) {
    allocator().begin_allocate_to_pool(pool_);
    platform().begin_capture(stream_, mode);
  }
  // Ends the capture and instantiates it; throws CaptureViolation when invalidated.
  GraphExecHandle end() {
    allocator().end_allocate_to_pool(pool_);
    GraphHandle graph = platform().end_capture(stream_);
    node_count_ = platform().graph_node_count(graph);
    dot_ = platform().graph_dot(graph);
    GraphExecHandle exec = platform().instantiate(graph, {});
    platform().destroy_graph(graph);
    return exec;
  }
  void replay(GraphExecHandle exec) { platform().launch_graph(exec, stream_); }

  Tensor random_tensor(std::mt19937& rng, int64_t n) {
    return Tensor::from_vector(random_floats(rng, static_cast<size_t>(n)), {n}, device());
  }

  // Runs `violation` inside a capture that already holds some work, and checks
  // that it throws CaptureViolation, invalidates the capture, that ending the
  // capture reports it, and that the stream captures and replays correctly after.
  void expect_violation_leaves_stream_usable(const std::function<void(Tensor&)>& violation,
                                             const std::string& reason) {
    GROVE_SEEDED_RNG(rng);
    Tensor a = random_tensor(rng, 300);
    Tensor b = random_tensor(rng, 300);
    Tensor out = random_tensor(rng, 300);
    std::vector<float> out_before = out.to_vector<float>();

    begin();
    testing::launch_add(a, b, out);
    EXPECT_THROW(violation(out), CaptureViolation);
    EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kInvalidated);
    EXPECT_THROW(testing::launch_add(a, b, out), CaptureViolation);  // the capture is dead
    try {
      end();
      ADD_FAILURE() << "end_capture accepted an invalidated capture";
    } catch (const CaptureViolation& error) {
      if (device().is_sim()) {
        EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
      }
    }
    EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kNone);
    EXPECT_EQ(allocator().current_pool(), kDefaultPool);
    EXPECT_EQ(out.to_vector<float>(), out_before) << "captured work ran";

    // The stream works eagerly and captures again.
    testing::launch_fill(out, 0.5f);
    EXPECT_EQ(out.to_vector<float>(), std::vector<float>(300, 0.5f));
    begin();
    testing::launch_add(a, b, out);
    GraphExecHandle exec = end();
    replay(exec);
    EXPECT_EQ(out.to_vector<float>(), plus(a.to_vector<float>(), b.to_vector<float>()));
    platform().destroy_graph_exec(exec);
  }

  DeviceContext* context_ = nullptr;
  StreamHandle stream_;
  std::unique_ptr<StreamGuard> guard_;
  PoolId pool_;
  size_t node_count_ = 0;
  std::string dot_;
};

TEST_P(CaptureTest, CaptureRecordsWorkWithoutRunningIt) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 1000);
  Tensor b = random_tensor(rng, 1000);
  Tensor sum = random_tensor(rng, 1000);
  Tensor scaled = random_tensor(rng, 1000);
  std::vector<float> sum_before = sum.to_vector<float>();
  std::vector<float> scaled_before = scaled.to_vector<float>();

  begin();
  testing::launch_add(a, b, sum);
  testing::launch_scale(sum, scaled, 3.0f);
  GraphExecHandle exec = end();
  EXPECT_EQ(node_count_, 2u);
  EXPECT_EQ(sum.to_vector<float>(), sum_before);
  EXPECT_EQ(scaled.to_vector<float>(), scaled_before);

  replay(exec);
  std::vector<float> expected = plus(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(sum.to_vector<float>(), expected);
  for (float& value : expected) value *= 3.0f;
  EXPECT_EQ(scaled.to_vector<float>(), expected);
  platform().destroy_graph_exec(exec);
}

TEST_P(CaptureTest, ReplayReadsMemoryAsItIsAtReplayTime) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 513);
  Tensor b = random_tensor(rng, 513);
  Tensor out = Tensor::empty({513}, DType::kF32, device());
  begin();
  testing::launch_add(a, b, out);
  GraphExecHandle exec = end();

  for (int round = 0; round < 3; ++round) {
    std::vector<float> fresh_a = random_floats(rng, 513);
    std::vector<float> fresh_b = random_floats(rng, 513);
    a.copy_from_host(fresh_a.data());
    b.copy_from_host(fresh_b.data());
    replay(exec);
    EXPECT_EQ(out.to_vector<float>(), plus(fresh_a, fresh_b)) << "round " << round;
  }
  platform().destroy_graph_exec(exec);
}

TEST_P(CaptureTest, EachReplayRunsTheCapturedWorkAgain) {
  GROVE_SEEDED_RNG(rng);
  Tensor x = random_tensor(rng, 64);
  std::vector<float> start = x.to_vector<float>();
  begin();
  testing::launch_add_scalar_in_place(x, 1.25f);
  GraphExecHandle exec = end();
  EXPECT_EQ(x.to_vector<float>(), start);
  replay(exec);
  replay(exec);
  std::vector<float> expected = start;
  for (float& value : expected) value = (value + 1.25f) + 1.25f;
  EXPECT_EQ(x.to_vector<float>(), expected);
  platform().destroy_graph_exec(exec);
}

TEST_P(CaptureTest, CopiesAndMemsetsAreCapturedAsNodes) {
  GROVE_SEEDED_RNG(rng);
  Tensor source = random_tensor(rng, 100);
  Tensor copy = random_tensor(rng, 100);
  Tensor zeroed = random_tensor(rng, 100);
  begin();
  platform().copy_async(copy.data_ptr(), source.data_ptr(), copy.nbytes(),
                        CopyKind::kDeviceToDevice, stream_);
  platform().memset_async(zeroed.data_ptr(), 0, zeroed.nbytes(), stream_);
  GraphExecHandle exec = end();
  EXPECT_EQ(node_count_, 2u);
  std::vector<float> fresh = random_floats(rng, 100);
  source.copy_from_host(fresh.data());
  replay(exec);
  EXPECT_EQ(copy.to_vector<float>(), fresh);
  EXPECT_EQ(zeroed.to_vector<float>(), std::vector<float>(100, 0.0f));
  platform().destroy_graph_exec(exec);
}

TEST_P(CaptureTest, SynchronizingTheCapturingStreamIsAViolation) {
  expect_violation_leaves_stream_usable([&](Tensor&) { platform().synchronize_stream(stream_); },
                                        "synchronizing a capturing stream");
}

TEST_P(CaptureTest, ReadingDeviceMemoryToTheHostIsAViolation) {
  expect_violation_leaves_stream_usable([](Tensor& out) { out.to_vector<float>(); },
                                        "reading device memory from the host");
}

TEST_P(CaptureTest, WritingDeviceMemoryFromTheHostIsAViolation) {
  expect_violation_leaves_stream_usable(
      [](Tensor& out) {
        std::vector<float> values(static_cast<size_t>(out.numel()), 2.0f);
        out.copy_from_host(values.data());
      },
      "writing device memory from the host");
}

TEST_P(CaptureTest, AllocatingOutsideThePrivatePoolIsAViolation) {
  expect_violation_leaves_stream_usable(
      [&](Tensor&) {
        allocator().begin_allocate_to_pool(kDefaultPool);
        try {
          Tensor::empty({16}, DType::kF32, device());
        } catch (...) {
          allocator().end_allocate_to_pool(kDefaultPool);
          throw;
        }
        allocator().end_allocate_to_pool(kDefaultPool);
      },
      "grove detected a capture violation");
}

TEST_P(CaptureTest, SynchronizingTheDeviceIsAViolation) {
  expect_violation_leaves_stream_usable([&](Tensor&) { platform().synchronize_device(); },
                                        "synchronizing the device");
}

TEST_P(CaptureTest, WorkOnTheLegacyDefaultStreamIsAViolation) {
  expect_violation_leaves_stream_usable(
      [&](Tensor& out) {
        platform().launch_kernel(
            testing::test_kernel(device(), testing::TestKernel::kFill),
            testing::launch_dims_for(out.numel()),
            KernelArgs().add_pointer(out.data_ptr()).add_i64(out.numel()).add_f32(1.0f),
            StreamHandle{});
      },
      "work on the legacy default stream");
}

TEST_P(CaptureTest, ThreadLocalModeLetsAnotherThreadSynchronizeAndWork) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 200);
  Tensor b = random_tensor(rng, 200);
  Tensor out = random_tensor(rng, 200);
  Tensor other = random_tensor(rng, 200);
  begin(CaptureMode::kThreadLocal);
  testing::launch_add(a, b, out);
  std::string other_thread_error;
  std::thread worker([&] {
    try {
      testing::launch_fill(other, 4.0f);  // on the worker's own stream: runs now
      device_context(device()).platform().synchronize_device();
      if (other.to_vector<float>() != std::vector<float>(200, 4.0f)) {
        other_thread_error = "the worker's eager work did not run";
      }
    } catch (const std::exception& error) {
      other_thread_error = error.what();
    }
  });
  worker.join();
  EXPECT_EQ(other_thread_error, "");
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kActive);
  GraphExecHandle exec = end();
  replay(exec);
  EXPECT_EQ(out.to_vector<float>(), plus(a.to_vector<float>(), b.to_vector<float>()));
  platform().destroy_graph_exec(exec);
}

TEST_P(CaptureTest, GlobalModeForbidsUnsafeCallsOnOtherThreads) {
  GROVE_SEEDED_RNG(rng);
  Tensor out = random_tensor(rng, 50);
  begin(CaptureMode::kGlobal);
  testing::launch_fill(out, 1.0f);
  bool violated = false;
  std::thread worker([&] {
    try {
      device_context(device()).platform().synchronize_device();
    } catch (const CaptureViolation&) {
      violated = true;
    }
  });
  worker.join();
  EXPECT_TRUE(violated);
  EXPECT_THROW(end(), CaptureViolation);
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kNone);
}

TEST_P(CaptureTest, CaptureOnTheLegacyDefaultStreamIsAnError) {
  try {
    platform().begin_capture(StreamHandle{}, CaptureMode::kThreadLocal);
    ADD_FAILURE() << "capture on the legacy default stream was accepted";
  } catch (const CaptureViolation& error) {
    EXPECT_NE(std::string(error.what()).find("create_stream"), std::string::npos) << error.what();
  }
  EXPECT_EQ(platform().capture_status(StreamHandle{}), CaptureStatus::kNone);
}

TEST_P(CaptureTest, ForkAndJoinAcrossTwoStreamsWithEvents) {
  GROVE_SEEDED_RNG(rng);
  StreamHandle side = context_->create_stream();
  EventHandle forked = platform().create_event(false);
  EventHandle joined = platform().create_event(false);
  Tensor a = random_tensor(rng, 400);
  Tensor b = random_tensor(rng, 400);
  Tensor sum = random_tensor(rng, 400);
  Tensor scaled = random_tensor(rng, 400);
  Tensor total = random_tensor(rng, 400);
  std::vector<float> total_before = total.to_vector<float>();

  begin();
  testing::launch_add(a, b, sum);
  platform().record_event(forked, stream_);
  platform().stream_wait_event(side, forked);
  EXPECT_EQ(platform().capture_status(side), CaptureStatus::kActive);
  {
    StreamGuard on_side(device(), side);
    testing::launch_scale(sum, scaled, -2.0f);
  }
  platform().record_event(joined, side);
  platform().stream_wait_event(stream_, joined);
  testing::launch_add(sum, scaled, total);
  GraphExecHandle exec = end();
  EXPECT_EQ(node_count_, 3u);
  EXPECT_EQ(platform().capture_status(side), CaptureStatus::kNone);
  EXPECT_EQ(total.to_vector<float>(), total_before);
  if (device().is_sim()) {  // the edges: add -> scale -> add, and add -> add
    EXPECT_NE(dot_.find("n0 -> n1"), std::string::npos) << dot_;
    EXPECT_NE(dot_.find("n1 -> n2"), std::string::npos) << dot_;
    EXPECT_NE(dot_.find("n0 -> n2"), std::string::npos) << dot_;
  }

  replay(exec);
  std::vector<float> expected = plus(a.to_vector<float>(), b.to_vector<float>());
  for (float& value : expected) value = value + value * -2.0f;
  EXPECT_EQ(total.to_vector<float>(), expected);
  platform().destroy_graph_exec(exec);
  platform().destroy_event(forked);
  platform().destroy_event(joined);
}

TEST_P(CaptureTest, AnUnjoinedForkedStreamMakesEndCaptureThrow) {
  GROVE_SEEDED_RNG(rng);
  StreamHandle side = context_->create_stream();
  EventHandle forked = platform().create_event(false);
  Tensor x = random_tensor(rng, 100);
  Tensor y = random_tensor(rng, 100);
  begin();
  testing::launch_fill(x, 3.0f);
  platform().record_event(forked, stream_);
  platform().stream_wait_event(side, forked);
  {
    StreamGuard on_side(device(), side);
    testing::launch_scale(x, y, 2.0f);
  }
  EXPECT_THROW(end(), CaptureViolation);
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kNone);
  EXPECT_EQ(platform().capture_status(side), CaptureStatus::kNone);
  {  // both streams work eagerly again
    StreamGuard on_side(device(), side);
    testing::launch_fill(y, 6.0f);
    platform().synchronize_stream(side);
  }
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(100, 6.0f));
  platform().destroy_event(forked);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(CaptureTest);

// Note [Events recorded during capture] in sim_platform.cc.
TEST(SimCapture, WaitingOnAnEventRecordedDuringAnEndedCaptureJoinsNothing) {
  DeviceContext& context = device_context(kSimDevice);
  Platform& platform = context.platform();
  StreamHandle origin = context.create_stream();
  StreamHandle later = context.create_stream();
  EventHandle event = platform.create_event(false);
  platform.begin_capture(origin, CaptureMode::kThreadLocal);
  platform.record_event(event, origin);
  GraphHandle graph = platform.end_capture(origin);
  platform.destroy_graph(graph);

  platform.stream_wait_event(later, event);
  EXPECT_EQ(platform.capture_status(later), CaptureStatus::kNone);
  EXPECT_NO_THROW(platform.synchronize_event(event));
  platform.synchronize_stream(later);
  platform.destroy_event(event);
}

}  // namespace
}  // namespace grove::runtime
