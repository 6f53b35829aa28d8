// GraphRecording on every device: capture into a private pool, instantiate,
// replay, exec update with the same or a different topology, kernel-node
// parameter updates, DOT output, and recovery from failed captures.
#include "runtime/graph_recording.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/span_copy_kernel.h"
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

KernelArgs add_args(const Tensor& a, const Tensor& b, const Tensor& out) {
  return KernelArgs()
      .add_pointer(a.data_ptr())
      .add_pointer(b.data_ptr())
      .add_pointer(out.data_ptr())
      .add_i64(out.numel());
}

class GraphRecordingTest : public ::grove::testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    context_ = &device_context(device());
    stream_ = context_->create_stream();
    guard_ = std::make_unique<StreamGuard>(device(), stream_);
    pool_ = context_->allocator().create_pool();
  }
  void TearDown() override {
    if (context_ == nullptr) return;
    guard_.reset();
    context_->allocator().release_pool(pool_);
  }

  Tensor random_tensor(std::mt19937& rng, int64_t n) {
    return Tensor::from_vector(random_floats(rng, static_cast<size_t>(n)), {n}, device());
  }

  DeviceContext* context_ = nullptr;
  StreamHandle stream_;
  std::unique_ptr<StreamGuard> guard_;
  PoolId pool_;
};

TEST_P(GraphRecordingTest, CaptureOnTheDefaultStreamIsAnErrorThatSaysWhatToDo) {
  GraphRecording recording(device());
  try {
    recording.capture_begin(StreamHandle{}, pool_);
    ADD_FAILURE() << "capture on the default stream was accepted";
  } catch (const CaptureViolation& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("non-default stream"), std::string::npos) << message;
    EXPECT_NE(message.find("create_stream"), std::string::npos) << message;
  }
  EXPECT_FALSE(recording.capturing());
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
}

TEST_P(GraphRecordingTest, CaptureNeedsAPrivatePool) {
  GraphRecording recording(device());
  EXPECT_THROW(recording.capture_begin(stream_, kDefaultPool), Error);
  EXPECT_FALSE(recording.capturing());
  EXPECT_EQ(context_->platform().capture_status(stream_), CaptureStatus::kNone);
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
}

TEST_P(GraphRecordingTest, MisuseOfTheLifecycleThrows) {
  GraphRecording recording(device());
  EXPECT_THROW(recording.capture_end(), Error);
  EXPECT_THROW(recording.instantiate(), Error);
  EXPECT_THROW(recording.replay(stream_), Error);
  EXPECT_THROW(recording.update(), Error);
  EXPECT_THROW(recording.dot(), Error);
  EXPECT_THROW(recording.set_kernel_node_args(0, KernelArgs()), Error);

  GROVE_SEEDED_RNG(rng);
  Tensor x = random_tensor(rng, 10);
  recording.capture_begin(stream_, pool_);
  EXPECT_TRUE(recording.capturing());
  EXPECT_THROW(recording.capture_begin(stream_, pool_), Error);
  testing::launch_add_scalar_in_place(x, 1.0f);
  recording.capture_end();
  recording.instantiate();
  EXPECT_THROW(recording.instantiate(), Error);
  EXPECT_THROW(recording.update(), Error);  // nothing re-captured
}

TEST_P(GraphRecordingTest, OutputsAllocatedDuringCaptureLiveInThePoolAndAppearOnReplay) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 700);
  Tensor b = random_tensor(rng, 700);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  EXPECT_EQ(context_->allocator().current_pool(), pool_);
  Tensor out = testing::scale(testing::add(a, b), 0.5f);
  recording.capture_end();
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
  EXPECT_EQ(context_->allocator().pool_containing(out.address()), pool_);
  EXPECT_EQ(context_->allocator().stats(pool_).live_blocks, 1u);  // the sum died already

  recording.instantiate();
  EXPECT_TRUE(recording.instantiated());
  recording.replay(stream_);
  std::vector<float> expected = plus(a.to_vector<float>(), b.to_vector<float>());
  for (float& value : expected) value *= 0.5f;
  EXPECT_EQ(out.to_vector<float>(), expected);

  std::vector<float> fresh = random_floats(rng, 700);
  a.copy_from_host(fresh.data());
  recording.replay(stream_);
  expected = plus(fresh, b.to_vector<float>());
  for (float& value : expected) value *= 0.5f;
  EXPECT_EQ(out.to_vector<float>(), expected);
}

TEST_P(GraphRecordingTest, KernelNodesAndDotNameEveryKernel) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 300);
  Tensor b = random_tensor(rng, 300);
  Tensor out = random_tensor(rng, 300);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_fill(a, 2.0f);
  testing::launch_add(a, b, out);
  testing::launch_scale(out, b, 3.0f);
  recording.capture_end();

  EXPECT_EQ(recording.node_count(), 3u);
  std::vector<KernelNodeInfo> nodes = recording.kernel_nodes();
  ASSERT_EQ(nodes.size(), 3u);
  const char* names[] = {"grove_test_fill_f32", "grove_test_add_f32", "grove_test_scale_f32"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(nodes[i].kernel_node_index, i);
    EXPECT_EQ(nodes[i].kernel_name, names[i]);
    EXPECT_TRUE(nodes[i].launched_by_grove);
  }
  EXPECT_EQ(nodes[1].args, add_args(a, b, out));

  std::string dot = recording.dot();
  EXPECT_NE(dot.find("digraph"), std::string::npos) << dot;
  for (const char* name : names) EXPECT_NE(dot.find(name), std::string::npos) << dot;
}

TEST_P(GraphRecordingTest, UpdateWithTheSameTopologySwapsInTheNewArguments) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 256), b = random_tensor(rng, 256);
  Tensor c = random_tensor(rng, 256), d = random_tensor(rng, 256);
  Tensor out = random_tensor(rng, 256), other_out = random_tensor(rng, 256);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  recording.capture_end();
  recording.instantiate();
  recording.replay(stream_);
  std::vector<float> first = plus(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(out.to_vector<float>(), first);

  recording.capture_begin(stream_, pool_);
  testing::launch_add(c, d, other_out);
  recording.capture_end();
  std::vector<float> other_before = other_out.to_vector<float>();
  EXPECT_TRUE(recording.update());
  EXPECT_EQ(recording.last_update_reason(), "");
  EXPECT_EQ(recording.kernel_nodes()[0].args, add_args(c, d, other_out));
  EXPECT_EQ(other_out.to_vector<float>(), other_before);  // updating runs nothing

  recording.replay(stream_);
  EXPECT_EQ(other_out.to_vector<float>(), plus(c.to_vector<float>(), d.to_vector<float>()));
  EXPECT_EQ(out.to_vector<float>(), first);  // the old pointers are no longer used
}

TEST_P(GraphRecordingTest, UpdateWithADifferentTopologyReinstantiates) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 128), b = random_tensor(rng, 128);
  Tensor out = random_tensor(rng, 128), scaled = random_tensor(rng, 128);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  recording.capture_end();
  recording.instantiate();

  // One more node.
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  testing::launch_scale(out, scaled, 4.0f);
  recording.capture_end();
  EXPECT_FALSE(recording.update());
  EXPECT_FALSE(recording.last_update_reason().empty());
  EXPECT_TRUE(recording.instantiated());
  EXPECT_EQ(recording.node_count(), 2u);
  recording.replay(stream_);
  std::vector<float> expected = plus(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(out.to_vector<float>(), expected);
  for (float& value : expected) value *= 4.0f;
  EXPECT_EQ(scaled.to_vector<float>(), expected);

  // Same node count, different kernels.
  recording.capture_begin(stream_, pool_);
  testing::launch_scale(a, out, -1.0f);
  testing::launch_add(a, out, scaled);
  recording.capture_end();
  EXPECT_FALSE(recording.update());
  if (device().is_sim()) {
    EXPECT_NE(recording.last_update_reason().find("kernel"), std::string::npos)
        << recording.last_update_reason();
  }
  recording.replay(stream_);
  EXPECT_EQ(scaled.to_vector<float>(), std::vector<float>(128, 0.0f));  // a + (-a)
}

TEST_P(GraphRecordingTest, SetKernelNodeArgsTakesEffectOnTheNextReplayOnly) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 333), b = random_tensor(rng, 333);
  Tensor c = random_tensor(rng, 333), d = random_tensor(rng, 333);
  Tensor out = random_tensor(rng, 333);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  recording.capture_end();
  recording.instantiate();
  recording.replay(stream_);
  std::vector<float> from_ab = plus(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(out.to_vector<float>(), from_ab);

  std::vector<float> sentinel = random_floats(rng, 333);
  out.copy_from_host(sentinel.data());
  recording.set_kernel_node_args(0, add_args(c, d, out));
  EXPECT_EQ(out.to_vector<float>(), sentinel);  // nothing ran
  recording.replay(stream_);
  EXPECT_EQ(out.to_vector<float>(), plus(c.to_vector<float>(), d.to_vector<float>()));

  EXPECT_THROW(recording.set_kernel_node_args(1, add_args(c, d, out)), Error);
  if (device().is_sim()) {
    EXPECT_THROW(recording.set_kernel_node_args(0, KernelArgs().add_pointer(out.data_ptr())),
                 Error);
  }
}

TEST_P(GraphRecordingTest, AFailedCaptureIsReportedAtCaptureEndAndTheStreamStaysUsable) {
  GROVE_SEEDED_RNG(rng);
  Tensor x = random_tensor(rng, 90);
  std::vector<float> start = x.to_vector<float>();
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add_scalar_in_place(x, 2.0f);
  EXPECT_THROW(x.to_vector<float>(), CaptureViolation);
  EXPECT_THROW(recording.capture_end(), CaptureViolation);
  EXPECT_FALSE(recording.capturing());
  EXPECT_FALSE(recording.instantiated());
  EXPECT_THROW(recording.instantiate(), Error);  // the recording stayed empty
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
  EXPECT_EQ(x.to_vector<float>(), start);

  recording.capture_begin(stream_, pool_);
  testing::launch_add_scalar_in_place(x, 2.0f);
  recording.capture_end();
  recording.instantiate();
  recording.replay(stream_);
  std::vector<float> expected = start;
  for (float& value : expected) value += 2.0f;
  EXPECT_EQ(x.to_vector<float>(), expected);
}

TEST_P(GraphRecordingTest, AFailedRecaptureKeepsTheInstantiatedGraphReplayable) {
  GROVE_SEEDED_RNG(rng);
  Tensor x = random_tensor(rng, 40);
  std::vector<float> start = x.to_vector<float>();
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add_scalar_in_place(x, 1.0f);
  recording.capture_end();
  recording.instantiate();

  recording.capture_begin(stream_, pool_);
  EXPECT_THROW(context_->platform().synchronize_device(), CaptureViolation);
  EXPECT_THROW(recording.capture_end(), CaptureViolation);
  EXPECT_THROW(recording.update(), Error);  // no pending re-capture
  recording.replay(stream_);
  std::vector<float> expected = start;
  for (float& value : expected) value += 1.0f;
  EXPECT_EQ(x.to_vector<float>(), expected);
}

TEST_P(GraphRecordingTest, AbortCaptureEndsTheCaptureWithoutThrowing) {
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  Tensor inside = Tensor::empty({8}, DType::kF32, device());
  recording.abort_capture();
  EXPECT_FALSE(recording.capturing());
  EXPECT_EQ(context_->platform().capture_status(stream_), CaptureStatus::kNone);
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
  recording.abort_capture();  // idempotent
}

TEST_P(GraphRecordingTest, DestroyingARecordingMidCaptureLeavesTheStreamUsable) {
  {
    GraphRecording recording(device());
    recording.capture_begin(stream_, pool_);
  }
  EXPECT_EQ(context_->platform().capture_status(stream_), CaptureStatus::kNone);
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
  GraphRecording again(device());
  again.capture_begin(stream_, pool_);
  again.capture_end();
}

TEST_P(GraphRecordingTest, CaptureEndWithAnInnerRoutingLeftOpenStillEndsTheCapture) {
  GraphRecording recording(device());
  PoolId other = context_->allocator().create_pool();
  recording.capture_begin(stream_, pool_);
  context_->allocator().begin_allocate_to_pool(other);  // never ended: a bug in captured code
  EXPECT_THROW(recording.capture_end(), Error);
  EXPECT_FALSE(recording.capturing());
  EXPECT_EQ(context_->platform().capture_status(stream_), CaptureStatus::kNone);
  context_->allocator().end_allocate_to_pool(other);
  context_->allocator().end_allocate_to_pool(pool_);
  EXPECT_EQ(context_->allocator().current_pool(), kDefaultPool);
  context_->allocator().release_pool(other);
}

// A head kernel (the span copy) runs before every captured node: here it
// fills the input the captured add reads. The captured node keeps its index.
TEST_P(GraphRecordingTest, AHeadKernelRunsBeforeTheCapturedNodes) {
  GROVE_SEEDED_RNG(rng);
  Tensor a = random_tensor(rng, 333), b = random_tensor(rng, 333);
  Tensor source = random_tensor(rng, 333), out = random_tensor(rng, 333);
  GraphRecording recording(device());
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  recording.capture_end();
  size_t nodes = recording.node_count();
  KernelArgs copy = span_copy_args(a.data_ptr(), source.data_ptr(), a.nbytes());
  size_t head =
      recording.add_head_kernel(span_copy_kernel(device()), span_copy_dims(a.nbytes()), copy);
  EXPECT_EQ(head, 1u);
  EXPECT_EQ(recording.node_count(), nodes + 1);
  std::vector<KernelNodeInfo> kernels = recording.kernel_nodes();
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].args, add_args(a, b, out));
  EXPECT_EQ(kernels[1].kernel_name, "grove_copy_span");
  EXPECT_TRUE(kernels[1].launched_by_grove);
  recording.instantiate();
  EXPECT_THROW(recording.add_head_kernel(span_copy_kernel(device()), span_copy_dims(8), copy),
               Error);
  recording.replay(stream_);
  EXPECT_EQ(a.to_vector<float>(), source.to_vector<float>());
  EXPECT_EQ(out.to_vector<float>(), plus(source.to_vector<float>(), b.to_vector<float>()));
  // The head node's source can be patched like any grove kernel node.
  Tensor other = random_tensor(rng, 333);
  copy.slots[kSpanCopySourceSlot] = reinterpret_cast<uint64_t>(other.data_ptr());
  recording.set_kernel_node_args(head, copy);
  recording.replay(stream_);
  EXPECT_EQ(out.to_vector<float>(), plus(other.to_vector<float>(), b.to_vector<float>()));
  // A re-capture would lose the head kernel: update() refuses.
  recording.capture_begin(stream_, pool_);
  testing::launch_add(a, b, out);
  recording.capture_end();
  EXPECT_THROW(recording.update(), Error);
}

// The span copy at every alignment and size class: 16-byte vectors where both
// pointers allow them, bytes elsewhere, nothing for 0 bytes.
TEST_P(GraphRecordingTest, TheSpanCopyKernelCopiesExactlyTheBytesAskedFor) {
  GROVE_SEEDED_RNG(rng);
  const int64_t floats = (1 << 18) + 64;
  Tensor source = random_tensor(rng, floats);
  Tensor destination = random_tensor(rng, floats);
  std::vector<float> source_host = source.to_vector<float>();
  KernelHandle kernel = span_copy_kernel(device());
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4096},
                       size_t{(1 << 20) + 3}}) {
    for (size_t from_offset : {0, 1, 4, 16}) {
      for (size_t to_offset : {0, 3, 16}) {
        std::vector<float> before = destination.to_vector<float>();
        auto* to = static_cast<char*>(destination.data_ptr()) + to_offset;
        const auto* from = static_cast<const char*>(source.data_ptr()) + from_offset;
        context_->platform().launch_kernel(kernel, span_copy_dims(bytes),
                                           span_copy_args(to, from, bytes), stream_);
        std::vector<float> after = destination.to_vector<float>();
        std::vector<char> expected(before.size() * sizeof(float));
        std::memcpy(expected.data(), before.data(), expected.size());
        std::memcpy(expected.data() + to_offset,
                    reinterpret_cast<const char*>(source_host.data()) + from_offset, bytes);
        ASSERT_EQ(std::memcmp(after.data(), expected.data(), expected.size()), 0)
            << bytes << " bytes from offset " << from_offset << " to offset " << to_offset;
      }
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(GraphRecordingTest);

// The span copy's PTX assembles for Hopper (where ptxas is installed).
TEST(SpanCopyKernel, PtxAssemblesForSm90) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "ptxas not installed at " << ptxas;
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("grove_span_copy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "span_copy.ptx") << span_copy_ptx();
  std::string command = std::string(ptxas) + " -arch=sm_90 -o " +
                        (dir / "span_copy.cubin").string() + " " +
                        (dir / "span_copy.ptx").string() + " 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::filesystem::remove_all(dir);
}

TEST(GraphRecording, CpuDevicesCannotRecord) {
  EXPECT_THROW(GraphRecording recording(kCpuDevice), DeviceError);
}

}  // namespace
}  // namespace grove::runtime
