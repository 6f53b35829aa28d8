// PinnedRowPool (Note [Pinned blocks cached per thread], serving/request_bytes.cc):
// blocks taken on some threads and freed on others are never handed out twice
// at once, keep what was written to them, and lie in the pool's pinned memory.
// HostRows copies their bytes whole (Note [Row bytes copied whole]).
#include "serving/request_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "serving/host_rows.h"

namespace grove::serving {
namespace {

struct Block {
  void* pointer = nullptr;
  size_t bytes = 0;
  uint64_t tag = 0;
};

// Every live block, to catch one handed out while another holds it.
class LiveBlocks {
 public:
  void taken(const Block& block) {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_TRUE(live_.insert(block.pointer).second) << block.pointer << " handed out twice";
  }
  void freed(const Block& block) {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_EQ(live_.erase(block.pointer), 1u);
  }

 private:
  std::mutex mutex_;
  std::set<void*> live_;
};

void fill(const Block& block) {
  auto* bytes = static_cast<uint8_t*>(block.pointer);
  for (size_t at = 0; at + 8 <= block.bytes; at += 8) std::memcpy(bytes + at, &block.tag, 8);
}

bool intact(const Block& block) {
  const auto* bytes = static_cast<const uint8_t*>(block.pointer);
  for (size_t at = 0; at + 8 <= block.bytes; at += 8) {
    uint64_t value = 0;
    std::memcpy(&value, bytes + at, 8);
    if (value != block.tag) return false;
  }
  return true;
}

TEST(PinnedRowPool, BlocksFreedOnOtherThreadsAreNeverHandedOutTwice) {
  constexpr int kProducers = 4, kConsumers = 4, kBlocksEach = 5000;
  const size_t sizes[] = {256, 2048, 2048, 2048, 3000, 65536, 100000};
  LiveBlocks live;
  std::mutex queue_mutex;
  std::deque<Block> queue;
  std::atomic<int> producing{kProducers};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(100 + p);
      for (int i = 0; i < kBlocksEach; ++i) {
        Block block;
        block.bytes = sizes[rng() % std::size(sizes)];
        block.tag = rng();
        block.pointer = PinnedRowPool::allocate(block.bytes);
        ASSERT_TRUE(PinnedRowPool::contains(block.pointer));
        live.taken(block);
        fill(block);
        // Some blocks go back on the thread that took them, most to a consumer.
        if (i % 4 == 0) {
          EXPECT_TRUE(intact(block));
          live.freed(block);
          PinnedRowPool::release(block.pointer, block.bytes);
          continue;
        }
        std::lock_guard<std::mutex> lock(queue_mutex);
        queue.push_back(block);
      }
      --producing;
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      while (true) {
        Block block;
        {
          std::lock_guard<std::mutex> lock(queue_mutex);
          if (queue.empty()) {
            if (producing == 0) return;
            continue;
          }
          block = queue.front();
          queue.pop_front();
        }
        EXPECT_TRUE(intact(block)) << "a block changed while it was live";
        live.freed(block);
        PinnedRowPool::release(block.pointer, block.bytes);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// A thread_local constructed before the thread's cache is destroyed after it:
// its rows go back to the pool, and the blocks stay usable by others.
TEST(PinnedRowPool, RowsOfAThreadLocalFreedAsTheThreadEndsGoBackToThePool) {
  for (int round = 0; round < 8; ++round) {
    std::thread([] {
      thread_local RowBytes rows;  // constructed empty, before the cache
      rows.resize(2048);           // the cache now exists
      std::memset(rows.data(), 7, rows.size());
    }).join();
  }
  std::vector<RowBytes> many;
  for (int i = 0; i < 200; ++i) {
    many.emplace_back(2048, static_cast<uint8_t>(i));
    EXPECT_TRUE(PinnedRowPool::contains(many.back().data()));
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(many[i][2047], static_cast<uint8_t>(i));
}

}  // namespace
}  // namespace grove::serving

namespace grove::serving {
namespace {

// Note [Row bytes copied in one call]: every size from empty to past a block,
// into empty, smaller and larger RowBytes, holds exactly the source bytes, in
// pinned memory from the pool.
TEST(RequestBytes, AssignRowBytesCopiesExactly) {
  const uint64_t seed = 41;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> source(20000);
  for (uint8_t& byte : source) byte = static_cast<uint8_t>(rng());
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{7}, size_t{256}, size_t{2048}, size_t{2049}, size_t{20000}}) {
    for (size_t before : {size_t{0}, size_t{3}, size_t{4096}}) {
      RowBytes bytes(before, 0xAB);
      const size_t offset = rng() % 16;
      const size_t take = std::min(size, source.size() - offset);
      assign_row_bytes(bytes, source.data() + offset, take);
      ASSERT_EQ(bytes.size(), take) << "seed " << seed;
      EXPECT_EQ(std::memcmp(bytes.data(), source.data() + offset, take), 0)
          << "size " << take << " over " << before << " bytes, seed " << seed;
      if (take > 0) {
        EXPECT_TRUE(PinnedRowPool::contains(bytes.data()) || take > (64u << 20));
      }
    }
  }
}

// Note [Row bytes copied whole]: a copied or copy-assigned HostRows holds the
// same shape, dtype and bytes in a pinned block of its own; a move hands over
// the block itself; the (shape, dtype, bytes) constructor keeps what it is given.
TEST(HostRows, CopiesHoldTheSameBytesInTheirOwnPinnedBlock) {
  const uint64_t seed = 43;
  std::mt19937_64 rng(seed);
  for (size_t size : {size_t{0}, size_t{4}, size_t{2048}, size_t{2052}, size_t{40000}}) {
    RowBytes bytes;
    std::vector<uint8_t> source(size);
    for (uint8_t& byte : source) byte = static_cast<uint8_t>(rng());
    assign_row_bytes(bytes, source.data(), size);
    const HostRows rows({static_cast<int64_t>(size / 4), 1}, runtime::DType::kI32, bytes);
    ASSERT_EQ(rows.bytes, bytes) << "seed " << seed;

    HostRows copy(rows);
    EXPECT_EQ(copy.shape, rows.shape);
    EXPECT_EQ(copy.dtype, runtime::DType::kI32);
    ASSERT_EQ(copy.bytes.size(), size);
    EXPECT_EQ(std::memcmp(copy.bytes.data(), source.data(), size), 0) << "seed " << seed;
    if (size > 0) {
      EXPECT_NE(copy.bytes.data(), rows.bytes.data());
      EXPECT_TRUE(PinnedRowPool::contains(copy.bytes.data()));
    }

    HostRows assigned = HostRows::from_values<float>({1.f, 2.f, 3.f}, {3});
    assigned = rows;
    EXPECT_EQ(assigned.shape, rows.shape);
    EXPECT_EQ(assigned.dtype, runtime::DType::kI32);
    EXPECT_EQ(assigned.bytes, rows.bytes);
    const HostRows& same = assigned;
    assigned = same;  // self-assignment keeps the bytes
    EXPECT_EQ(assigned.bytes, rows.bytes);

    const uint8_t* block = copy.bytes.data();
    HostRows moved(std::move(copy));
    EXPECT_EQ(moved.bytes.data(), block);
    EXPECT_EQ(moved.bytes, rows.bytes);

    // A request of copies, as `serve` submits one from its pool.
    std::vector<HostRows> request{rows, rows};
    std::vector<HostRows> request_copy = request;
    for (const HostRows& input : request_copy) EXPECT_EQ(input.bytes, rows.bytes);
  }
}

}  // namespace
}  // namespace grove::serving
