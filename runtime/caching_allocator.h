// CachingAllocator hands out device memory in blocks carved from large
// segments it gets from a Platform, and keeps freed blocks for reuse instead of
// returning them to the device. Blocks are kept per stream (a block freed on
// one stream is reused on that stream only, which keeps reuse stream-ordered).
//
// Private pools (PoolId) own their own segments. A thread routes its
// allocations into a pool with begin_allocate_to_pool / end_allocate_to_pool;
// the tree manager does this around warm-ups and captures so that every
// output of a tree lives in one pool. checkpoint / restore snapshot and
// re-impose a pool's block layout (Note [Checkpoint restore]).
//
// Note [Free segments of pools no graph captured]
// When the device refuses a segment, the allocator gives back the fully free
// segments it caches and asks once more. It gave back only the default
// pool's, so a graph tree's pool kept the peak of a warm-up that failed (one
// that ran out of memory, say): memory nothing used and nobody else could
// get (an eager model's next call failed beside it, on sim with 20 MiB).
// A pool whose memory no captured graph refers to (no allocation in it
// happened during a capture) gives its fully free segments back too; a pool
// a graph was captured into keeps them, since its replays write there. Test:
// CachingAllocatorTest.OutOfDeviceMemoryFreesSegmentsOfPoolsNoGraphCaptured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/platform.h"
#include "runtime/storage.h"

namespace grove::runtime {

struct PoolId {
  uint64_t value = 0;  // 0 is the default (shared) pool
  bool is_default() const { return value == 0; }
  friend bool operator==(PoolId, PoolId) = default;
  friend auto operator<=>(PoolId, PoolId) = default;
};
inline constexpr PoolId kDefaultPool{0};

struct PoolStats {
  size_t reserved_bytes = 0;        // sum of segment sizes
  size_t allocated_bytes = 0;       // sum of allocated block sizes
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t segments = 0;
  size_t live_blocks = 0;  // allocated blocks
  size_t free_blocks = 0;
};

// A block as a checkpoint sees it: where it sits in its segment and its state.
struct BlockState {
  size_t offset = 0;
  size_t size = 0;
  bool allocated = false;
  StreamHandle stream;
  friend bool operator==(const BlockState&, const BlockState&) = default;
};

struct SegmentState {
  void* base = nullptr;
  size_t size = 0;
  StreamHandle stream;
  std::vector<BlockState> blocks;  // in address order, covering the segment
  friend bool operator==(const SegmentState&, const SegmentState&) = default;
};

struct PoolCheckpoint {
  PoolId pool;
  std::vector<SegmentState> segments;  // in segment address order
  size_t allocated_blocks() const;
  friend bool operator==(const PoolCheckpoint&, const PoolCheckpoint&) = default;
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;     // requests up to this...
  static constexpr size_t kSmallSegment = size_t{2} << 20;  // ...share 2 MiB segments
  static constexpr size_t kLargeRounding = size_t{2} << 20;

  explicit CachingAllocator(Platform& platform);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocates `bytes` for use on `stream`, in the pool the calling thread is
  // routed to (the default pool otherwise). A capturing stream must be routed
  // to a private pool: otherwise this throws CaptureViolation and invalidates
  // the capture. Zero bytes gives a storage with no memory.
  StoragePtr allocate(size_t bytes, StreamHandle stream);

  PoolId create_pool();
  // Gives private pool `pool` a free segment of at least `bytes` for use on
  // `stream` now, so that later allocations there take no new segment until
  // it is used up (TreeConfig::initial_pool_bytes). Throws OutOfMemoryError
  // naming the bytes when the device cannot hold it.
  void reserve(PoolId pool, size_t bytes, StreamHandle stream);
  // Routes the calling thread's allocations to `pool` until the matching end.
  // Routings nest; end must name the innermost pool.
  void begin_allocate_to_pool(PoolId pool);
  void end_allocate_to_pool(PoolId pool);
  // The pool the calling thread allocates from now.
  PoolId current_pool() const;
  // Returns every segment of `pool` to the platform. Storages still holding
  // blocks of it lose ownership (the caller must have poisoned or dropped them).
  void release_pool(PoolId pool);

  PoolCheckpoint checkpoint(PoolId pool) const;
  // Note [Checkpoint restore]: afterwards the pool's segments and blocks are
  // exactly those of `checkpoint`. Each storage in `live_storages` must point at
  // a block the checkpoint holds allocated; it becomes that block's owner again.
  // Every other block is free, including blocks the checkpoint held allocated
  // (outputs that died since) and storages of the pool not listed (they lose
  // ownership). Segments created after the checkpoint go back to the platform.
  void restore(PoolId pool, const PoolCheckpoint& checkpoint,
               const std::vector<StoragePtr>& live_storages);

  // Note [Blocks moved out of a pool]: copies each allocated block of `pool`
  // whose address is not in `kept` into new memory of the default pool (on
  // `stream`) and re-points the storage that owns it there (Storage::rebind),
  // which frees the pool block. Every view of the storage follows it. Returns
  // the bytes of each storage moved. Test:
  // CachingAllocatorTest.BlocksMovedOutOfAPoolKeepTheirValuesAndFreeThePool.
  std::vector<size_t> move_blocks_out_of_pool(PoolId pool,
                                              const std::unordered_set<const void*>& kept,
                                              StreamHandle stream);

  PoolStats stats(PoolId pool) const;
  // The private or default pool whose segment contains `address`, if any.
  std::optional<PoolId> pool_containing(const void* address) const;
  // Returns the fully free segments of the default pool to the platform.
  void empty_cache();

  // Fault injection for tests: the next `count` requests for a new segment
  // (allocations the cached blocks cannot serve) throw OutOfMemoryError as if
  // the device were full, without the usual retry after emptying the cache.
  void inject_allocation_failures(int count);

  Platform& platform() const { return platform_; }

 private:
  struct Segment;
  struct Block;
  struct Pool;
  class BlockOwner;
  struct FreeOrder {
    bool operator()(const Block* a, const Block* b) const;
  };

  Pool& pool_locked(PoolId id);
  const Pool& pool_locked(PoolId id) const;
  Block* find_free_block_locked(Pool& pool, size_t size, StreamHandle stream);
  Block* new_segment_locked(Pool& pool, size_t size, StreamHandle stream);
  void split_locked(Pool& pool, Block* block, size_t size);
  void mark_allocated_locked(Pool& pool, Block* block);
  void free_block(Block* block);
  void free_block_locked(Pool& pool, Block* block);
  void release_segment_locked(Pool& pool, Segment* segment);
  void detach_owners_locked(Pool& pool);

  Platform& platform_;
  mutable std::mutex mutex_;
  std::map<uint64_t, std::unique_ptr<Pool>> pools_;
  uint64_t next_pool_id_ = 1;
  int injected_failures_ = 0;
};

}  // namespace grove::runtime
