// Note [Read buffers kept by their loop] (serving/read_buffer_cache.cc).
#include "serving/read_buffer_cache.h"

#include <gtest/gtest.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <cstring>
#include <thread>
#include <vector>

namespace grove::serving {
namespace {

TEST(ReadBufferCache, AFreedBlockServesThisThreadsNextBufferOfItsSize) {
  const size_t before = read_buffer_bytes_kept();
  void* block = take_read_buffer(16 << 10);
  std::memset(block, 7, 16 << 10);
  give_read_buffer(block, 16 << 10);
  EXPECT_EQ(read_buffer_bytes_kept(), before + (16 << 10));
  EXPECT_EQ(take_read_buffer(10000), block) << "10,000 bytes take a 16 KiB block";
  EXPECT_EQ(read_buffer_bytes_kept(), before);
  give_read_buffer(block, 10000);
  // Another thread's frees stay with that thread.
  std::thread([] {
    void* other = take_read_buffer(16 << 10);
    give_read_buffer(other, 16 << 10);
    EXPECT_EQ(read_buffer_bytes_kept(), size_t{16} << 10);
  }).join();
  EXPECT_EQ(read_buffer_bytes_kept(), before + (16 << 10));
}

TEST(ReadBufferCache, KeepsABoundedAmountAndNoLargeBlocks) {
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(take_read_buffer(32 << 10));
  for (void* block : blocks) give_read_buffer(block, 32 << 10);
  std::thread([] {
    std::vector<void*> many;
    for (int i = 0; i < 64; ++i) many.push_back(take_read_buffer(32 << 10));
    for (void* block : many) give_read_buffer(block, 32 << 10);
    EXPECT_EQ(read_buffer_bytes_kept(), size_t{256} << 10) << "at most 256 KiB per size";
    void* large = take_read_buffer(1 << 20);
    give_read_buffer(large, 1 << 20);
    EXPECT_EQ(read_buffer_bytes_kept(), size_t{256} << 10) << "a 1 MiB block is not kept";
  }).join();
}

TEST(ReadBufferCache, BeastBufferKeepsItsBytesThroughGrowth) {
  boost::beast::basic_flat_buffer<ReadBufferAllocator<char>> buffer(80 << 10);
  buffer.reserve(16 << 10);
  const std::string text(12000, 'r');
  auto room = buffer.prepare(text.size());
  std::memcpy(room.data(), text.data(), text.size());
  buffer.commit(text.size());
  buffer.reserve(40 << 10);  // grows: the bytes move to a larger block
  ASSERT_EQ(buffer.size(), text.size());
  EXPECT_EQ(std::memcmp(buffer.data().data(), text.data(), text.size()), 0);
  buffer.consume(buffer.size());
  buffer.shrink_to_fit();
  EXPECT_EQ(buffer.capacity(), 0u) << "an idle connection's buffer holds nothing";
}

}  // namespace
}  // namespace grove::serving
