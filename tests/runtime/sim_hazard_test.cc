// The sim stream hazard checker (Note [Stream hazards] in
// runtime/sim/hazard_checker.cc), on synchronous and asynchronous sim alike:
// a read of memory another stream writes with no event between them is
// reported naming both operations, the same with the event (or a host
// synchronization) is clean, and a block the allocator hands out again while
// another stream's work that used it is pending is reported.
#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"
#include "tests/common/test_util.h"
#include "tests/runtime/sim_stream_rig.h"

namespace grove::testing {
namespace {

using runtime::sim::HazardMode;
using runtime::sim::SimHazard;

constexpr int64_t kElements = 256;

class SimHazardTest : public ::testing::TestWithParam<bool> {
 protected:
  runtime::SimOptions options(HazardMode mode = HazardMode::kRecord) const {
    runtime::SimOptions result;
    result.async = GetParam();
    result.hazards = mode;
    return result;
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_P(SimHazardTest, ReportsAReadOfAnotherStreamsWriteWithoutAnEvent) {
  SimStreamRig rig(options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  rig.launch_consume(produced, consumed, kElements, rig.b);  // no event: a hazard
  auto hazards = rig.hazards();
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].kind, SimHazard::Kind::kUnorderedAccess);
  EXPECT_TRUE(contains(hazards[0].earlier, "kernel produce")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].earlier, "stream 1")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].later, "kernel consume")) << hazards[0].later;
  EXPECT_TRUE(contains(hazards[0].later, "stream 2")) << hazards[0].later;
  EXPECT_TRUE(contains(hazards[0].message, "kernel produce")) << hazards[0].message;
  EXPECT_TRUE(contains(hazards[0].message, "kernel consume")) << hazards[0].message;
  EXPECT_TRUE(contains(hazards[0].message, "stream_wait_event")) << hazards[0].message;
}

TEST_P(SimHazardTest, AnEventBetweenTheStreamsIsClean) {
  SimStreamRig rig(options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  rig.order(rig.a, rig.b);
  rig.launch_consume(produced, consumed, kElements, rig.b);
  EXPECT_EQ(rig.read(consumed, kElements, rig.b), std::vector<float>(kElements, 3.0f));
  EXPECT_TRUE(rig.hazards().empty()) << rig.hazards()[0].message;
}

TEST_P(SimHazardTest, AHostSynchronizationOrdersTheStreams) {
  SimStreamRig rig(options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  rig.platform->synchronize_stream(rig.a);
  rig.launch_consume(produced, consumed, kElements, rig.b);
  EXPECT_EQ(rig.read(consumed, kElements, rig.b), std::vector<float>(kElements, 3.0f));
  EXPECT_TRUE(rig.hazards().empty()) << rig.hazards()[0].message;
}

TEST_P(SimHazardTest, ReportsAWriteOverAnotherStreamsPendingRead) {
  SimStreamRig rig(options());
  auto source = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.a);
  rig.launch_produce(source, kElements, 1.0f, rig.a);
  rig.platform->synchronize_stream(rig.a);
  rig.launch_consume(source, consumed, kElements, rig.a);
  rig.platform->memset_async(source->address(), 0, kElements * sizeof(float), rig.b);
  auto hazards = rig.hazards();
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_TRUE(contains(hazards[0].earlier, "kernel consume")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].later, "memset")) << hazards[0].later;
}

TEST_P(SimHazardTest, ReportsACopyOfMemoryAnotherStreamIsWriting) {
  SimStreamRig rig(options());
  auto produced = rig.buffer(kElements, rig.a);
  auto copy = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  rig.platform->copy_async(copy->address(), produced->address(), kElements * sizeof(float),
                           runtime::CopyKind::kDeviceToDevice, rig.b);
  auto hazards = rig.hazards();
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_TRUE(contains(hazards[0].earlier, "kernel produce")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].later, "memcpy")) << hazards[0].later;
}

TEST_P(SimHazardTest, ReportsABlockHandedOutAgainWhileAnotherStreamStillUsesIt) {
  SimStreamRig rig(options());
  auto input = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(input, kElements, 2.0f, rig.a);
  rig.order(rig.a, rig.b);
  rig.launch_consume(input, consumed, kElements, rig.b);  // stream b reads `input`...
  void* address = input->address();
  input.reset();  // ...which is freed with no event back to stream a
  auto reused = rig.buffer(kElements, rig.a);
  ASSERT_EQ(reused->address(), address) << "the allocator was expected to hand the block out again";
  auto hazards = rig.hazards();
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].kind, SimHazard::Kind::kBlockReusedEarly);
  EXPECT_TRUE(contains(hazards[0].earlier, "kernel consume")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].earlier, "stream 2")) << hazards[0].earlier;
  EXPECT_TRUE(contains(hazards[0].later, "allocation")) << hazards[0].later;
  EXPECT_TRUE(contains(hazards[0].later, "stream 1")) << hazards[0].later;
  EXPECT_TRUE(contains(hazards[0].message, "handed out again")) << hazards[0].message;
}

TEST_P(SimHazardTest, ABlockReusedAfterAnEventBackIsClean) {
  SimStreamRig rig(options());
  auto input = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(input, kElements, 2.0f, rig.a);
  rig.order(rig.a, rig.b);
  rig.launch_consume(input, consumed, kElements, rig.b);
  rig.order(rig.b, rig.a);
  void* address = input->address();
  input.reset();
  auto reused = rig.buffer(kElements, rig.a);
  ASSERT_EQ(reused->address(), address);
  EXPECT_TRUE(rig.hazards().empty()) << rig.hazards()[0].message;
}

TEST_P(SimHazardTest, ThrowModeStopsTheSecondOperationNamingBoth) {
  SimStreamRig rig(options(HazardMode::kThrow));
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  expect_error<runtime::sim::StreamHazardError>(
      [&] { rig.launch_consume(produced, consumed, kElements, rig.b); },
      {"kernel produce", "kernel consume", "stream 1", "stream 2"});
}

TEST_P(SimHazardTest, ChecksEachNodeOfAGraphLaunch) {
  SimStreamRig rig(options());
  auto produced = rig.buffer(kElements, rig.a);
  auto consumed = rig.buffer(kElements, rig.b);
  runtime::StreamHandle capture = rig.platform->create_stream();
  rig.platform->begin_capture(capture, runtime::CaptureMode::kThreadLocal);
  rig.launch_consume(produced, consumed, kElements, capture);
  runtime::GraphHandle graph = rig.platform->end_capture(capture);
  runtime::GraphExecHandle exec = rig.platform->instantiate(graph, {});
  EXPECT_TRUE(rig.hazards().empty()) << "captured work does not run";
  rig.launch_produce(produced, kElements, 2.0f, rig.a);
  rig.platform->launch_graph(exec, rig.b);
  auto hazards = rig.hazards();
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_TRUE(contains(hazards[0].later, "kernel consume")) << hazards[0].later;
  EXPECT_TRUE(contains(hazards[0].later, "graph launch")) << hazards[0].later;
  rig.platform->synchronize_device();
  rig.platform->destroy_graph_exec(exec);
  rig.platform->destroy_graph(graph);
  rig.platform->destroy_stream(capture);
}

TEST(SimOptions, ComeFromTheEnvironmentAndRejectUnknownValues) {
  {
    ScopedEnv async("GROVE_SIM_ASYNC", "1");
    ScopedEnv check("GROVE_SIM_CHECK", "record");
    runtime::SimOptions options = runtime::SimOptions::from_environment();
    EXPECT_TRUE(options.async);
    EXPECT_EQ(options.hazards, HazardMode::kRecord);
  }
  {
    ScopedEnv check("GROVE_SIM_CHECK", "loud");
    expect_error<ConfigError>([] { runtime::SimOptions::from_environment(); },
                              {"GROVE_SIM_CHECK='loud'", "off, record or throw"});
  }
  ScopedEnv async("GROVE_SIM_ASYNC", "yes");
  expect_error<ConfigError>([] { runtime::SimOptions::from_environment(); },
                            {"GROVE_SIM_ASYNC='yes'", "0 or 1"});
}

// The sim orders streams with events only: a stream ordered implicitly with
// the legacy default stream (a CUDA blocking stream, Note [Calls from the
// legacy default stream] in capi/grove.cc) is refused, naming what to use.
TEST_P(SimHazardTest, LegacyOrderedStreamIsRefusedNamingEvents) {
  SimStreamRig rig(options());
  expect_error<DeviceError>([&] { rig.platform->create_legacy_ordered_stream(); },
                            {"sim:0", "legacy default stream", "stream_wait_event"});
}

INSTANTIATE_TEST_SUITE_P(Sim, SimHazardTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("async") : std::string("sync");
                         });

}  // namespace
}  // namespace grove::testing
