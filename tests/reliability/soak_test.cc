// 10^5 replays on sim across generations, kept and dropped outputs and
// changing input addresses: outputs correct, pool figures repeat exactly
// from cycle to cycle (soak.h). The cuda instance runs a shorter soak; the
// lead's 10-minute run uses soak_main.
#include "tests/reliability/soak.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "tests/common/test_util.h"

namespace grove::reliability {
namespace {

class Soak : public testing::DeviceTest {};

TEST_P(Soak, HundredThousandReplaysKeepPoolBytesAndLiveBlocksConstant) {
  SoakOptions options;
  options.device = device();
  options.seed = testing::test_seed();
  options.replays = device().is_cuda() ? 20000 : 100000;
  // The 10-minute GPU run (the bundle carries this test, not soak_main):
  // GROVE_SOAK_SECONDS=600 soak_test --gtest_filter='*cuda*'
  if (const char* seconds = std::getenv("GROVE_SOAK_SECONDS")) {
    options.seconds = std::atof(seconds);
    options.replays = int64_t{1} << 62;
  }
  SoakReport report = run_soak(options);
  std::cout << report.str() << std::endl;
  EXPECT_TRUE(report.problem.empty()) << report.problem << " (seed " << options.seed << ")";
  if (options.seconds == 0) {
    EXPECT_GE(report.replays, options.replays);
  }
  EXPECT_EQ(report.start, report.end) << report.str();
  EXPECT_LE(report.recordings, 40) << "the tree should stop growing after the first cycles";
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(Soak);

}  // namespace
}  // namespace grove::reliability
