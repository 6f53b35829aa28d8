// CachingAllocator over a private sim platform per test, so that stats and
// segments start from zero: splitting, coalescing, per-stream reuse, private
// pools, checkpoint/restore, failures.
#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/error.h"
#include "runtime/platform_factory.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

constexpr size_t kAlign = CachingAllocator::kAlignment;
constexpr size_t kMiB = size_t{1} << 20;

size_t rounded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

char* address_of(const StoragePtr& storage) { return static_cast<char*>(storage->address()); }

// Routes the calling thread to a pool for one scope, even when an assertion returns early.
class Routing {
 public:
  Routing(CachingAllocator& allocator, PoolId pool) : allocator_(allocator), pool_(pool) {
    allocator_.begin_allocate_to_pool(pool_);
  }
  ~Routing() { allocator_.end_allocate_to_pool(pool_); }

 private:
  CachingAllocator& allocator_;
  PoolId pool_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override { make(); }
  void TearDown() override { destroy(); }

  void make() {
    platform_ = make_platform(kSimDevice);
    allocator_ = std::make_unique<CachingAllocator>(*platform_);
    stream_a_ = platform_->create_stream();
    stream_b_ = platform_->create_stream();
  }
  void destroy() {
    allocator_.reset();
    platform_.reset();
  }

  CachingAllocator& allocator() { return *allocator_; }

  std::unique_ptr<Platform> platform_;
  std::unique_ptr<CachingAllocator> allocator_;
  StreamHandle stream_a_;
  StreamHandle stream_b_;
};

TEST_F(CachingAllocatorTest, SplitsOneSmallSegmentIntoConsecutiveAlignedBlocks) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_int_distribution<size_t> size_of(1, 64 * 1024);
  std::vector<size_t> sizes(8);
  for (size_t& size : sizes) size = size_of(rng);
  std::vector<StoragePtr> storages;
  for (size_t size : sizes) storages.push_back(allocator().allocate(size, stream_a_));

  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(storages[i]->nbytes(), sizes[i]);
    // Blocks sit at multiples of kAlignment from the segment base, which the
    // platform aligns to at least 256 bytes (as cudaMalloc does).
    EXPECT_EQ(static_cast<size_t>(address_of(storages[i]) - address_of(storages[0])) % kAlign, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(address_of(storages[i])) % 256, 0u);
    if (i > 0) {
      EXPECT_EQ(address_of(storages[i]), address_of(storages[i - 1]) + rounded(sizes[i - 1]));
    }
    total += rounded(sizes[i]);
  }
  PoolStats stats = allocator().stats(kDefaultPool);
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.reserved_bytes, CachingAllocator::kSmallSegment);
  EXPECT_EQ(stats.allocated_bytes, total);
  EXPECT_EQ(stats.live_blocks, sizes.size());
  EXPECT_EQ(stats.free_blocks, 1u);  // the segment's tail
}

TEST_F(CachingAllocatorTest, CoalescesFreedNeighboursBackIntoOneBlock) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_int_distribution<size_t> size_of(1, 100 * 1024);
  size_t size_a = size_of(rng), size_b = size_of(rng), size_c = size_of(rng);
  StoragePtr a = allocator().allocate(size_a, stream_a_);
  StoragePtr b = allocator().allocate(size_b, stream_a_);
  StoragePtr c = allocator().allocate(size_c, stream_a_);
  char* base = address_of(a);

  b.reset();  // a hole between a and c
  EXPECT_EQ(allocator().stats(kDefaultPool).free_blocks, 2u);
  a.reset();  // merges with the hole on its right
  EXPECT_EQ(allocator().stats(kDefaultPool).free_blocks, 2u);
  PoolCheckpoint layout = allocator().checkpoint(kDefaultPool);
  ASSERT_EQ(layout.segments.size(), 1u);
  ASSERT_EQ(layout.segments[0].blocks.size(), 3u);
  EXPECT_EQ(layout.segments[0].blocks[0].size, rounded(size_a) + rounded(size_b));
  EXPECT_FALSE(layout.segments[0].blocks[0].allocated);

  c.reset();  // merges with both sides: the whole segment is one free block again
  PoolStats stats = allocator().stats(kDefaultPool);
  EXPECT_EQ(stats.free_blocks, 1u);
  EXPECT_EQ(stats.live_blocks, 0u);
  EXPECT_EQ(stats.allocated_bytes, 0u);
  layout = allocator().checkpoint(kDefaultPool);
  ASSERT_EQ(layout.segments[0].blocks.size(), 1u);
  EXPECT_EQ(layout.segments[0].blocks[0].size, CachingAllocator::kSmallSegment);

  // The merged span is handed out again from the segment's start.
  StoragePtr whole =
      allocator().allocate(rounded(size_a) + rounded(size_b) + rounded(size_c), stream_a_);
  EXPECT_EQ(address_of(whole), base);
}

TEST_F(CachingAllocatorTest, ReusesABlockFreedOnTheSameStream) {
  GROVE_SEEDED_RNG(rng);
  size_t size = std::uniform_int_distribution<size_t>(1, 512 * 1024)(rng);
  StoragePtr first = allocator().allocate(size, stream_a_);
  char* address = address_of(first);
  first.reset();
  StoragePtr second = allocator().allocate(size, stream_a_);
  EXPECT_EQ(address_of(second), address);
  EXPECT_EQ(allocator().stats(kDefaultPool).segments, 1u);
}

TEST_F(CachingAllocatorTest, NeverHandsABlockFreedOnOneStreamToAnother) {
  GROVE_SEEDED_RNG(rng);
  size_t size = std::uniform_int_distribution<size_t>(1, 512 * 1024)(rng);
  StoragePtr on_a = allocator().allocate(size, stream_a_);
  char* segment_a = address_of(on_a);
  on_a.reset();

  StoragePtr on_b = allocator().allocate(size, stream_b_);
  char* b = address_of(on_b);
  EXPECT_TRUE(b < segment_a || b >= segment_a + CachingAllocator::kSmallSegment)
      << "a block cached for stream A was handed to stream B";
  EXPECT_EQ(allocator().stats(kDefaultPool).segments, 2u);

  PoolCheckpoint layout = allocator().checkpoint(kDefaultPool);
  for (const SegmentState& segment : layout.segments) {
    for (const BlockState& block : segment.blocks) EXPECT_EQ(block.stream, segment.stream);
  }
}

TEST_F(CachingAllocatorTest, SmallRequestsShareSegmentsAndLargeOnesGetRoundedSegments) {
  GROVE_SEEDED_RNG(rng);
  size_t small = std::uniform_int_distribution<size_t>(1, CachingAllocator::kSmallSize)(rng);
  StoragePtr a = allocator().allocate(small, stream_a_);
  EXPECT_EQ(allocator().stats(kDefaultPool).reserved_bytes, CachingAllocator::kSmallSegment);

  size_t large = std::uniform_int_distribution<size_t>(5 * kMiB + 1, 6 * kMiB)(rng);
  StoragePtr b = allocator().allocate(large, stream_a_);
  PoolStats stats = allocator().stats(kDefaultPool);
  EXPECT_EQ(stats.segments, 2u);
  EXPECT_EQ(stats.reserved_bytes, CachingAllocator::kSmallSegment + 6 * kMiB);
  EXPECT_EQ(stats.allocated_bytes, rounded(small) + rounded(large));

  // A freed large block serves a smaller large request from the same segment.
  char* large_address = address_of(b);
  b.reset();
  StoragePtr c = allocator().allocate(3 * kMiB, stream_a_);
  EXPECT_EQ(address_of(c), large_address);
  EXPECT_EQ(allocator().stats(kDefaultPool).segments, 2u);
}

TEST_F(CachingAllocatorTest, ZeroBytesGivesAStorageWithoutMemory) {
  StoragePtr empty = allocator().allocate(0, stream_a_);
  EXPECT_EQ(empty->nbytes(), 0u);
  EXPECT_FALSE(empty->owns_memory());
  EXPECT_EQ(allocator().stats(kDefaultPool).segments, 0u);
}

TEST_F(CachingAllocatorTest, KeepsStatsPerPoolWithAPeakThatSurvivesFrees) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_int_distribution<size_t> size_of(1, 200 * 1024);
  PoolId pool = allocator().create_pool();
  size_t shared_size = size_of(rng);
  StoragePtr shared = allocator().allocate(shared_size, stream_a_);
  std::vector<StoragePtr> in_pool;
  size_t pool_bytes = 0;
  {
    Routing routing(allocator(), pool);
    for (int i = 0; i < 4; ++i) {
      size_t size = size_of(rng);
      pool_bytes += rounded(size);
      in_pool.push_back(allocator().allocate(size, stream_a_));
    }
  }
  PoolStats default_stats = allocator().stats(kDefaultPool);
  EXPECT_EQ(default_stats.allocated_bytes, rounded(shared_size));
  EXPECT_EQ(default_stats.live_blocks, 1u);

  PoolStats pool_stats = allocator().stats(pool);
  EXPECT_EQ(pool_stats.allocated_bytes, pool_bytes);
  EXPECT_EQ(pool_stats.peak_allocated_bytes, pool_bytes);
  EXPECT_EQ(pool_stats.live_blocks, 4u);
  EXPECT_EQ(pool_stats.reserved_bytes, CachingAllocator::kSmallSegment);

  size_t freed = rounded(in_pool[1]->nbytes()) + rounded(in_pool[3]->nbytes());
  in_pool[1].reset();
  in_pool[3].reset();
  pool_stats = allocator().stats(pool);
  EXPECT_EQ(pool_stats.allocated_bytes, pool_bytes - freed);
  EXPECT_EQ(pool_stats.peak_allocated_bytes, pool_bytes);
  EXPECT_EQ(pool_stats.live_blocks, 2u);
  EXPECT_EQ(allocator().stats(kDefaultPool).allocated_bytes, rounded(shared_size));
}

TEST_F(CachingAllocatorTest, RoutesAllocationsToAPrivatePoolUntilTheMatchingEnd) {
  PoolId pool = allocator().create_pool();
  EXPECT_FALSE(pool.is_default());
  EXPECT_EQ(allocator().current_pool(), kDefaultPool);
  StoragePtr inside;
  {
    Routing routing(allocator(), pool);
    EXPECT_EQ(allocator().current_pool(), pool);
    inside = allocator().allocate(4096, stream_a_);
  }
  EXPECT_EQ(allocator().current_pool(), kDefaultPool);
  StoragePtr outside = allocator().allocate(4096, stream_a_);
  EXPECT_EQ(allocator().pool_containing(inside->address()), pool);
  EXPECT_EQ(allocator().pool_containing(outside->address()), kDefaultPool);
  EXPECT_EQ(allocator().stats(pool).live_blocks, 1u);
  EXPECT_EQ(allocator().stats(kDefaultPool).live_blocks, 1u);
  int on_stack = 0;
  EXPECT_EQ(allocator().pool_containing(&on_stack), std::nullopt);
}

TEST_F(CachingAllocatorTest, RoutingsNestAndEndMustNameTheInnermostPool) {
  PoolId outer = allocator().create_pool();
  PoolId inner = allocator().create_pool();
  allocator().begin_allocate_to_pool(outer);
  allocator().begin_allocate_to_pool(inner);
  EXPECT_EQ(allocator().current_pool(), inner);
  try {
    allocator().end_allocate_to_pool(outer);
    ADD_FAILURE() << "a mismatched end_allocate_to_pool was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("innermost"), std::string::npos) << error.what();
  }
  EXPECT_EQ(allocator().current_pool(), inner);  // the failed end changed nothing
  allocator().end_allocate_to_pool(inner);
  EXPECT_EQ(allocator().current_pool(), outer);
  allocator().end_allocate_to_pool(outer);
  EXPECT_EQ(allocator().current_pool(), kDefaultPool);
  EXPECT_THROW(allocator().end_allocate_to_pool(outer), Error);
}

TEST_F(CachingAllocatorTest, RoutingToAnUnknownPoolThrows) {
  EXPECT_THROW(allocator().begin_allocate_to_pool(PoolId{12345}), Error);
  EXPECT_EQ(allocator().current_pool(), kDefaultPool);
  EXPECT_THROW(allocator().stats(PoolId{12345}), Error);
}

TEST_F(CachingAllocatorTest, RoutingIsPerThread) {
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  PoolId seen_by_other_thread = pool;
  StoragePtr from_other_thread;
  std::thread other([&] {
    seen_by_other_thread = allocator().current_pool();
    from_other_thread = allocator().allocate(1024, stream_b_);
  });
  other.join();
  EXPECT_EQ(seen_by_other_thread, kDefaultPool);
  EXPECT_EQ(allocator().pool_containing(from_other_thread->address()), kDefaultPool);
}

TEST_F(CachingAllocatorTest, ReleasePoolReturnsSegmentsAndDisownsLiveStorages) {
  PoolId pool = allocator().create_pool();
  StoragePtr survivor;
  {
    Routing routing(allocator(), pool);
    survivor = allocator().allocate(3 * kMiB, stream_a_);
    StoragePtr dead = allocator().allocate(1000, stream_b_);
  }
  EXPECT_EQ(allocator().stats(pool).segments, 2u);
  void* address = survivor->address();
  allocator().release_pool(pool);
  EXPECT_FALSE(survivor->owns_memory());
  EXPECT_EQ(survivor->address(), address);
  EXPECT_EQ(allocator().pool_containing(address), std::nullopt);
  EXPECT_THROW(allocator().stats(pool), Error);
  EXPECT_THROW(allocator().begin_allocate_to_pool(pool), Error);
  survivor.reset();  // must not touch the released pool
  EXPECT_THROW(allocator().release_pool(kDefaultPool), Error);
}

// Note [Blocks moved out of a pool]: a kept block is copied into the default
// pool and its storage re-pointed; a block in `kept` stays; the pool block is
// free afterwards.
TEST_F(CachingAllocatorTest, BlocksMovedOutOfAPoolKeepTheirValuesAndFreeThePool) {
  PoolId pool = allocator().create_pool();
  StoragePtr state;
  StoragePtr output;
  {
    Routing routing(allocator(), pool);
    state = allocator().allocate(4000, stream_a_);
    output = allocator().allocate(2000, stream_a_);
  }
  std::vector<uint8_t> bytes(4000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  std::memcpy(state->data(), bytes.data(), bytes.size());  // sim memory is host memory
  void* old_address = state->address();
  std::vector<size_t> moved =
      allocator().move_blocks_out_of_pool(pool, {output->address()}, stream_a_);
  platform_->synchronize_stream(stream_a_);
  EXPECT_EQ(moved, std::vector<size_t>{4000});
  EXPECT_NE(state->address(), old_address);
  EXPECT_EQ(allocator().pool_containing(state->address()), kDefaultPool);
  EXPECT_TRUE(state->owns_memory());
  EXPECT_EQ(std::memcmp(state->data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(allocator().pool_containing(output->address()), pool);
  EXPECT_EQ(allocator().stats(pool).live_blocks, 1u);  // only the kept output
  EXPECT_TRUE(allocator().move_blocks_out_of_pool(pool, {output->address()}, stream_a_).empty());
  state.reset();
  EXPECT_EQ(allocator().stats(kDefaultPool).live_blocks, 0u);
}

TEST_F(CachingAllocatorTest, EmptyCacheReturnsOnlyFullyFreeDefaultSegments) {
  StoragePtr kept = allocator().allocate(1000, stream_a_);
  StoragePtr dropped = allocator().allocate(4 * kMiB, stream_a_);
  dropped.reset();
  EXPECT_EQ(allocator().stats(kDefaultPool).segments, 2u);
  allocator().empty_cache();
  PoolStats stats = allocator().stats(kDefaultPool);
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.reserved_bytes, CachingAllocator::kSmallSegment);
  EXPECT_EQ(stats.live_blocks, 1u);
}

// Note [Checkpoint restore] in caching_allocator.h, step by step.
TEST_F(CachingAllocatorTest, RestoreKeepsExactlyTheCheckpointedBlocksAndRebindsLiveStorages) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_int_distribution<size_t> size_of(1, 300 * 1024);
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr x1 = allocator().allocate(size_of(rng), stream_a_);
  StoragePtr x2 = allocator().allocate(size_of(rng), stream_a_);
  PoolCheckpoint checkpoint = allocator().checkpoint(pool);
  PoolStats at_checkpoint = allocator().stats(pool);
  EXPECT_EQ(checkpoint.pool, pool);
  EXPECT_EQ(checkpoint.allocated_blocks(), 2u);

  // More work after the checkpoint: small blocks in the same segment, a new large segment.
  StoragePtr y1 = allocator().allocate(size_of(rng), stream_a_);
  StoragePtr y2 = allocator().allocate(3 * kMiB, stream_a_);
  EXPECT_EQ(allocator().stats(pool).segments, 2u);

  allocator().restore(pool, checkpoint, {x1, x2});
  EXPECT_EQ(allocator().checkpoint(pool), checkpoint);
  PoolStats restored = allocator().stats(pool);
  EXPECT_EQ(restored.segments, at_checkpoint.segments);
  EXPECT_EQ(restored.reserved_bytes, at_checkpoint.reserved_bytes);
  EXPECT_EQ(restored.allocated_bytes, at_checkpoint.allocated_bytes);
  EXPECT_EQ(restored.live_blocks, 2u);
  EXPECT_TRUE(x1->owns_memory());
  EXPECT_TRUE(x2->owns_memory());
  EXPECT_FALSE(y1->owns_memory());
  EXPECT_FALSE(y2->owns_memory());

  // Storages that lost ownership free nothing; rebound ones free their block.
  y1.reset();
  y2.reset();
  EXPECT_EQ(allocator().stats(pool).live_blocks, 2u);
  size_t x1_size = rounded(x1->nbytes());
  x1.reset();
  EXPECT_EQ(allocator().stats(pool).live_blocks, 1u);
  EXPECT_EQ(allocator().stats(pool).allocated_bytes, at_checkpoint.allocated_bytes - x1_size);
}

TEST_F(CachingAllocatorTest, RestoreFreesTheBlocksOfOutputsThatDiedSinceTheCheckpoint) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_int_distribution<size_t> size_of(1, 200 * 1024);
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr x1 = allocator().allocate(size_of(rng), stream_a_);
  StoragePtr x2 = allocator().allocate(size_of(rng), stream_a_);
  StoragePtr x3 = allocator().allocate(size_of(rng), stream_a_);
  PoolCheckpoint checkpoint = allocator().checkpoint(pool);
  char* x2_address = address_of(x2);
  size_t x2_size = x2->nbytes();

  x2.reset();  // died after the checkpoint
  StoragePtr later = allocator().allocate(size_of(rng), stream_a_);
  allocator().restore(pool, checkpoint, {x1, x3});

  EXPECT_EQ(allocator().stats(pool).live_blocks, 2u);
  EXPECT_EQ(allocator().stats(pool).allocated_bytes, rounded(x1->nbytes()) + rounded(x3->nbytes()));
  PoolCheckpoint now = allocator().checkpoint(pool);
  ASSERT_EQ(now.segments.size(), 1u);
  for (const BlockState& block : now.segments[0].blocks) {
    if (static_cast<char*>(now.segments[0].base) + block.offset == x2_address) {
      EXPECT_FALSE(block.allocated) << "the dead output's block is still allocated";
    }
  }
  // The hole is exactly x2's block, the best fit for a request of its size.
  StoragePtr again = allocator().allocate(x2_size, stream_a_);
  EXPECT_EQ(address_of(again), x2_address);
}

TEST_F(CachingAllocatorTest, RestoreFreesBlocksOfUnlistedStoragesEvenWhileTheyLive) {
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr listed = allocator().allocate(2048, stream_a_);
  StoragePtr unlisted = allocator().allocate(2048, stream_a_);
  PoolCheckpoint checkpoint = allocator().checkpoint(pool);
  allocator().restore(pool, checkpoint, {listed});
  EXPECT_EQ(allocator().stats(pool).live_blocks, 1u);
  EXPECT_TRUE(listed->owns_memory());
  EXPECT_FALSE(unlisted->owns_memory());
  unlisted.reset();
  EXPECT_EQ(allocator().stats(pool).live_blocks, 1u);
}

TEST_F(CachingAllocatorTest, RestoreReturnsSegmentsCreatedAfterTheCheckpoint) {
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  PoolCheckpoint empty = allocator().checkpoint(pool);
  EXPECT_TRUE(empty.segments.empty());
  StoragePtr big = allocator().allocate(7 * kMiB, stream_a_);
  StoragePtr small = allocator().allocate(100, stream_b_);
  EXPECT_EQ(allocator().stats(pool).segments, 2u);
  allocator().restore(pool, empty, {});
  PoolStats stats = allocator().stats(pool);
  EXPECT_EQ(stats.segments, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.live_blocks, 0u);
  EXPECT_EQ(allocator().pool_containing(big->address()), std::nullopt);
}

TEST_F(CachingAllocatorTest, RestoreRejectsBadArgumentsWithoutChangingThePool) {
  PoolId pool = allocator().create_pool();
  PoolId other = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr kept = allocator().allocate(1000, stream_a_);
  PoolCheckpoint checkpoint = allocator().checkpoint(pool);
  StoragePtr newer = allocator().allocate(1000, stream_a_);
  StoragePtr newer_large = allocator().allocate(3 * kMiB, stream_a_);
  PoolCheckpoint before = allocator().checkpoint(pool);
  PoolStats stats_before = allocator().stats(pool);

  // A live storage that the checkpoint does not hold allocated.
  EXPECT_THROW(allocator().restore(pool, checkpoint, {kept, newer}), Error);
  // A checkpoint of another pool.
  EXPECT_THROW(allocator().restore(other, checkpoint, {kept}), Error);

  EXPECT_EQ(allocator().checkpoint(pool), before);
  PoolStats stats_after = allocator().stats(pool);
  EXPECT_EQ(stats_after.live_blocks, stats_before.live_blocks);
  EXPECT_EQ(stats_after.allocated_bytes, stats_before.allocated_bytes);
  EXPECT_TRUE(kept->owns_memory());
  EXPECT_TRUE(newer->owns_memory());
  EXPECT_TRUE(newer_large->owns_memory());
  newer.reset();
  EXPECT_EQ(allocator().stats(pool).live_blocks, stats_before.live_blocks - 1);
}

TEST_F(CachingAllocatorTest, RestoreFromAStaleCheckpointThrowsWithoutChangingThePool) {
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr first = allocator().allocate(1000, stream_a_);
  PoolCheckpoint early = allocator().checkpoint(pool);
  StoragePtr large = allocator().allocate(3 * kMiB, stream_a_);
  PoolCheckpoint late = allocator().checkpoint(pool);
  allocator().restore(pool, early, {first});  // returns the large segment
  PoolCheckpoint before = allocator().checkpoint(pool);
  EXPECT_THROW(allocator().restore(pool, late, {first}), Error);
  EXPECT_EQ(allocator().checkpoint(pool), before);
  EXPECT_TRUE(first->owns_memory());
}

TEST_F(CachingAllocatorTest, InjectedFailureThrowsOutOfMemoryAndLeavesTheAllocatorUsable) {
  StoragePtr cached = allocator().allocate(1000, stream_a_);
  PoolCheckpoint before = allocator().checkpoint(kDefaultPool);

  allocator().inject_allocation_failures(1);
  // Served from the cached segment: no segment request, so no failure yet.
  StoragePtr from_cache = allocator().allocate(1000, stream_a_);
  from_cache.reset();
  try {
    allocator().allocate(3 * kMiB, stream_a_);
    ADD_FAILURE() << "an injected failure did not surface";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("out of memory on sim:0"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(allocator().checkpoint(kDefaultPool), before);
  EXPECT_EQ(allocator().stats(kDefaultPool).live_blocks, 1u);

  StoragePtr after = allocator().allocate(3 * kMiB, stream_a_);  // the failure was used up
  EXPECT_TRUE(after->owns_memory());
  EXPECT_EQ(allocator().stats(kDefaultPool).live_blocks, 2u);
}

TEST_F(CachingAllocatorTest, OutOfDeviceMemoryFreesCachedSegmentsAndRetries) {
  destroy();
  ASSERT_EQ(setenv("GROVE_SIM_MEMORY_BYTES", std::to_string(4 * kMiB).c_str(), 1), 0);
  make();
  unsetenv("GROVE_SIM_MEMORY_BYTES");

  StoragePtr big = allocator().allocate(3 * kMiB, stream_a_);  // a 4 MiB segment: all there is
  EXPECT_THROW(allocator().allocate(100, stream_b_), OutOfMemoryError);
  big.reset();  // cached, not returned
  EXPECT_EQ(allocator().stats(kDefaultPool).reserved_bytes, 4 * kMiB);

  // A private pool needs its own segment: the cached default segment is given back for it.
  PoolId pool = allocator().create_pool();
  Routing routing(allocator(), pool);
  StoragePtr in_pool = allocator().allocate(100, stream_a_);
  EXPECT_EQ(allocator().stats(kDefaultPool).reserved_bytes, 0u);
  EXPECT_EQ(allocator().stats(pool).reserved_bytes, CachingAllocator::kSmallSegment);
}

// Note [Free segments of pools no graph captured]
TEST_F(CachingAllocatorTest, OutOfDeviceMemoryFreesSegmentsOfPoolsNoGraphCaptured) {
  destroy();
  ASSERT_EQ(setenv("GROVE_SIM_MEMORY_BYTES", std::to_string(4 * kMiB).c_str(), 1), 0);
  make();
  unsetenv("GROVE_SIM_MEMORY_BYTES");

  // A warm-up's memory, freed: the pool caches its 4 MiB segment.
  PoolId warmed = allocator().create_pool();
  {
    Routing routing(allocator(), warmed);
    StoragePtr peak = allocator().allocate(3 * kMiB, stream_a_);
  }
  EXPECT_EQ(allocator().stats(warmed).reserved_bytes, 4 * kMiB);
  // The default pool's request gets it back.
  StoragePtr eager = allocator().allocate(3 * kMiB, stream_b_);
  EXPECT_EQ(allocator().stats(warmed).reserved_bytes, 0u);
  eager.reset();
  allocator().empty_cache();

  // A pool a graph was captured into keeps its free segment.
  PoolId captured = allocator().create_pool();
  platform_->begin_capture(stream_a_, CaptureMode::kThreadLocal);
  {
    Routing routing(allocator(), captured);
    StoragePtr inside = allocator().allocate(3 * kMiB, stream_a_);
  }
  platform_->destroy_graph(platform_->end_capture(stream_a_));
  EXPECT_EQ(allocator().stats(captured).reserved_bytes, 4 * kMiB);
  EXPECT_THROW(allocator().allocate(3 * kMiB, stream_b_), OutOfMemoryError);
  EXPECT_EQ(allocator().stats(captured).reserved_bytes, 4 * kMiB);
}

TEST_F(CachingAllocatorTest, AllocationOnACapturingStreamOutsideAPrivatePoolIsAViolation) {
  platform_->begin_capture(stream_a_, CaptureMode::kThreadLocal);
  try {
    allocator().allocate(1000, stream_a_);
    ADD_FAILURE() << "allocation outside a private pool during capture was accepted";
  } catch (const CaptureViolation& violation) {
    EXPECT_NE(std::string(violation.what()).find("begin_allocate_to_pool"), std::string::npos)
        << violation.what();
  }
  EXPECT_EQ(platform_->capture_status(stream_a_), CaptureStatus::kInvalidated);
  EXPECT_THROW(platform_->end_capture(stream_a_), CaptureViolation);
  EXPECT_EQ(allocator().stats(kDefaultPool).live_blocks, 0u);

  // Routed to a private pool, the same allocation during a capture is fine.
  PoolId pool = allocator().create_pool();
  platform_->begin_capture(stream_a_, CaptureMode::kThreadLocal);
  {
    Routing routing(allocator(), pool);
    StoragePtr storage = allocator().allocate(1000, stream_a_);
    EXPECT_EQ(allocator().pool_containing(storage->address()), pool);
  }
  GraphHandle graph = platform_->end_capture(stream_a_);
  EXPECT_EQ(platform_->graph_node_count(graph), 0u);
  platform_->destroy_graph(graph);
}

}  // namespace
}  // namespace grove::runtime
