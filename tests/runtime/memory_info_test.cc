// Platform::memory_info(): the device's free memory falls by what is allocated
// and comes back when it is freed (sim exactly; cuda within its allocation
// granularity), so that a free-memory delta measures what a server holds.
#include <gtest/gtest.h>

#include "runtime/device_context.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

class MemoryInfo : public testing::DeviceTest {};

TEST_P(MemoryInfo, FreeMemoryFallsByWhatIsAllocatedAndComesBack) {
  Platform& platform = device_context(device()).platform();
  constexpr int64_t kBytes = 64 << 20;
  constexpr int64_t kGranularity = 2 << 20;  // cudaMalloc rounds up to 2 MiB pages
  const Platform::MemoryInfo before = platform.memory_info();
  ASSERT_GT(before.total_bytes, 0);
  ASSERT_GE(before.free_bytes, kBytes);
  EXPECT_LE(before.free_bytes, before.total_bytes);
  void* block = platform.allocate_raw(kBytes);
  const Platform::MemoryInfo during = platform.memory_info();
  platform.free_raw(block);
  const Platform::MemoryInfo after = platform.memory_info();
  EXPECT_EQ(during.total_bytes, before.total_bytes);
  EXPECT_LE(during.free_bytes, before.free_bytes - kBytes + kGranularity);
  EXPECT_GE(during.free_bytes, before.free_bytes - kBytes - kGranularity);
  EXPECT_GE(after.free_bytes, before.free_bytes - kGranularity);
  if (device().is_sim()) {
    EXPECT_EQ(during.free_bytes, before.free_bytes - kBytes);
    EXPECT_EQ(after.free_bytes, before.free_bytes);
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(MemoryInfo);

}  // namespace
}  // namespace grove::runtime
