// Asynchronous sim streams (Note [Asynchronous sim streams] in
// runtime/sim/sim_platform.cc): work runs off the calling thread in stream
// order, a missing event between two streams gives a wrong answer (and the
// event a right one), host synchronization waits for real, a kernel's
// exception comes back at the next synchronization, and a copy from pageable
// host memory reads its source before the call returns.
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "runtime/error.h"
#include "tests/common/test_util.h"
#include "tests/runtime/sim_stream_rig.h"

namespace grove::testing {
namespace {

constexpr int64_t kElements = 128;

runtime::SimOptions async_options() {
  runtime::SimOptions options;
  options.async = true;
  return options;
}

std::thread::id g_kernel_thread;
void record_thread_kernel(const runtime::LaunchDims*, const uint64_t*) {
  g_kernel_thread = std::this_thread::get_id();
}

void throwing_kernel(const runtime::LaunchDims*, const uint64_t*) {
  throw std::runtime_error("kernel fault for the test");
}

TEST(SimAsync, RunsStreamWorkOffTheCallingThreadInOrder) {
  SimStreamRig rig(async_options());
  EXPECT_TRUE(runtime::sim_is_async(*rig.platform));
  auto kernel = rig.platform->load_kernel({"record_thread", "", &record_thread_kernel});
  auto x = rig.buffer(kElements, rig.a);
  auto y = rig.buffer(kElements, rig.a);
  rig.launch_produce(x, kElements, 5.0f, rig.a);
  rig.launch_consume(x, y, kElements, rig.a);
  rig.platform->launch_kernel(kernel, {}, {}, rig.a);
  EXPECT_EQ(rig.read(y, kElements, rig.a), std::vector<float>(kElements, 6.0f));
  EXPECT_NE(g_kernel_thread, std::this_thread::get_id());
}

TEST(SimAsync, AMissingEventGivesAWrongAnswer) {
  SimStreamRig rig(async_options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 1.0f, rig.a);
  rig.platform->synchronize_stream(rig.a);
  Gate gate;
  rig.launch_produce(produced, kElements, 2.0f, rig.a, &gate);  // waits for the gate
  rig.launch_consume(produced, consumed, kElements, rig.b);     // no event: reads the old value
  EXPECT_EQ(rig.read(consumed, kElements, rig.b), std::vector<float>(kElements, 2.0f));
  gate.open = true;
  rig.platform->synchronize_stream(rig.a);
  EXPECT_EQ(rig.read(produced, kElements, rig.a), std::vector<float>(kElements, 2.0f));
}

TEST(SimAsync, AnEventMakesTheOtherStreamWait) {
  SimStreamRig rig(async_options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  Gate gate;
  rig.launch_produce(produced, kElements, 2.0f, rig.a, &gate);
  rig.order(rig.a, rig.b);
  rig.launch_consume(produced, consumed, kElements, rig.b);
  gate.open = true;
  EXPECT_EQ(rig.read(consumed, kElements, rig.b), std::vector<float>(kElements, 3.0f));
}

TEST(SimAsync, HostSynchronizationWaitsForTheWork) {
  SimStreamRig rig(async_options());
  auto produced = rig.buffer(kElements, rig.a);
  Gate gate;
  rig.launch_produce(produced, kElements, 7.0f, rig.a, &gate);
  runtime::EventHandle done = rig.platform->create_event(false);
  rig.platform->record_event(done, rig.a);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.open = true;
  });
  rig.platform->synchronize_event(done);
  EXPECT_TRUE(gate.open.load());
  EXPECT_EQ(static_cast<const float*>(produced->address())[kElements - 1], 7.0f);
  opener.join();
  rig.platform->destroy_event(done);
}

TEST(SimAsync, AKernelExceptionComesBackAtTheNextSynchronization) {
  SimStreamRig rig(async_options());
  auto kernel = rig.platform->load_kernel({"throwing", "", &throwing_kernel});
  rig.platform->launch_kernel(kernel, {}, {}, rig.a);  // returns: the fault is not known yet
  EXPECT_THROW(rig.platform->synchronize_stream(rig.a), std::runtime_error);
  rig.platform->synchronize_stream(rig.a);  // reported once
}

TEST(SimAsync, ACopyFromPageableMemoryReadsItsSourceBeforeReturning) {
  SimStreamRig rig(async_options());
  auto destination = rig.buffer(kElements, rig.a);
  Gate gate;
  rig.launch_produce(destination, kElements, 0.0f, rig.a, &gate);  // holds the stream
  std::vector<float> source(kElements, 4.0f);
  rig.platform->copy_async(destination->address(), source.data(), kElements * sizeof(float),
                           runtime::CopyKind::kHostToDevice, rig.a);
  source.assign(kElements, -1.0f);  // CUDA allows this once copy_async returned
  gate.open = true;
  EXPECT_EQ(rig.read(destination, kElements, rig.a), std::vector<float>(kElements, 4.0f));
}

}  // namespace
}  // namespace grove::testing
