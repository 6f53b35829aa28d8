// Note [Freed memory kept by the serving process] (serving/process_memory.cc).
#include "serving/process_memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace grove::serving {
namespace {

// Frees 4 MiB of blocks below glibc's mmap threshold, allocated on this
// (the main) thread, and returns the free top its heap keeps afterwards.
size_t free_top_after_freeing_4_mib() {
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) {
    blocks.push_back(std::malloc(100 << 10));
    std::memset(blocks.back(), 1, 100 << 10);  // resident
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  return mallinfo2().keepcost;
}

TEST(ProcessMemory, KeepsFreedMemoryUnlessAskedNotTo) {
  ::setenv("GROVE_SERVE_TRIM_AS_BEFORE", "1", 1);
  EXPECT_FALSE(keep_freed_memory_for_serving()) << "GROVE_SERVE_TRIM_AS_BEFORE=1 sets nothing";
  EXPECT_LT(free_top_after_freeing_4_mib(), size_t{1} << 20)
      << "glibc's default gives a free top past 128 KiB back";
  ::unsetenv("GROVE_SERVE_TRIM_AS_BEFORE");
  EXPECT_TRUE(keep_freed_memory_for_serving());
  EXPECT_GE(free_top_after_freeing_4_mib(), size_t{2} << 20) << "kept, up to 32 MiB";
}

}  // namespace
}  // namespace grove::serving
