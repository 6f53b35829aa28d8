// WhileGraph on every device: a body ending with a count-down kernel runs as
// many times as the counter says in one launch, again on the next launch (the
// condition resets), and a flag-driven body stops when its flag clears; a
// body with a host function is refused (CUDA forbids them in WHILE bodies).
#include "runtime/while_graph.h"

#include <gtest/gtest.h>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/testing/test_kernels.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

class WhileGraphTest : public ::grove::testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    if (device().is_cpu()) GTEST_SKIP() << "cpu records no graphs";
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

  DeviceContext* context_ = nullptr;
  StreamHandle stream_;
  std::unique_ptr<StreamGuard> guard_;
  PoolId pool_;
};

TEST_P(WhileGraphTest, BodyRunsAsManyTimesAsTheCountDownSaysPerLaunch) {
  GROVE_SEEDED_RNG(rng);
  const int64_t iterations = std::uniform_int_distribution<int64_t>(2, 9)(rng);
  Tensor x = Tensor::from_vector(std::vector<float>{0.5f, -1.5f, 2.0f}, {3}, device());
  Tensor remaining = Tensor::from_vector(std::vector<int64_t>{iterations}, {1}, device());
  WhileGraph loop(device());
  loop.capture_body_begin(stream_, pool_);
  ::grove::testing::launch_add_scalar_in_place(x, 1.0f);
  launch_while_count_down(device(), loop.condition(), static_cast<int64_t*>(remaining.data_ptr()),
                          stream_);
  loop.capture_body_end();
  EXPECT_GE(loop.body_node_count(), 2u);
  // Capturing ran nothing.
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0.5f, -1.5f, 2.0f}));
  loop.instantiate();
  loop.launch(stream_);
  const float n = static_cast<float>(iterations);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0.5f + n, -1.5f + n, 2.0f + n}));
  EXPECT_EQ(remaining.to_vector<int64_t>(), std::vector<int64_t>{0});
  // The condition is true again at the next launch; a fresh counter of 3 runs it 3 times.
  remaining.copy_from_host(std::vector<int64_t>{3}.data());
  loop.launch(stream_);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3.5f + n, 1.5f + n, 5.0f + n}));
}

TEST_P(WhileGraphTest, FlagClearedByTheBodyStopsTheLoop) {
  // The body adds 1 and then sets the condition from a flag that is already 0:
  // the loop runs exactly once (the condition is checked after each run).
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}, device());
  Tensor flag = Tensor::from_vector(std::vector<int32_t>{0}, {1}, device());
  WhileGraph loop(device());
  loop.capture_body_begin(stream_, pool_);
  ::grove::testing::launch_add_scalar_in_place(x, 1.0f);
  launch_set_while_condition(device(), loop.condition(),
                             static_cast<const int32_t*>(flag.data_ptr()), stream_);
  loop.capture_body_end();
  loop.instantiate();
  loop.launch(stream_);
  loop.launch(stream_);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3.0f, 4.0f}));
}

void do_nothing(void*) {}

TEST_P(WhileGraphTest, BodyWithAHostFunctionIsRefused) {
  if (device().is_cuda()) GTEST_SKIP() << "CUDA reports this at instantiation, sim at recording";
  WhileGraph loop(device());
  loop.capture_body_begin(stream_, pool_);
  context_->platform().launch_host_function(stream_, &do_nothing, nullptr);
  EXPECT_THROW(loop.capture_body_end(), Error);
  // The stream left capture mode and works.
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f}, {1}, device());
  ::grove::testing::launch_add_scalar_in_place(x, 1.0f);
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>{2.0f});
}

TEST_P(WhileGraphTest, LaunchBeforeTheBodyIsCapturedIsAnError) {
  WhileGraph loop(device());
  EXPECT_THROW(loop.instantiate(), Error);
  EXPECT_THROW(loop.launch(stream_), Error);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(WhileGraphTest);

}  // namespace
}  // namespace grove::runtime
