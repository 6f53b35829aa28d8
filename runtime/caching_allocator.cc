#include "runtime/caching_allocator.h"

#include <algorithm>
#include <unordered_set>

#include "runtime/error.h"

namespace grove::runtime {

struct CachingAllocator::Segment {
  void* base = nullptr;
  size_t size = 0;
  StreamHandle stream;
  Pool* pool = nullptr;
  Block* first = nullptr;  // blocks form an address-ordered list covering the segment
};

struct CachingAllocator::Block {
  Segment* segment = nullptr;
  char* address = nullptr;
  size_t size = 0;
  bool allocated = false;
  StreamHandle stream;
  Block* previous = nullptr;
  Block* next = nullptr;
  BlockOwner* owner = nullptr;     // set while a storage owns this block
  std::weak_ptr<Storage> storage;  // the storage that owns it (move_blocks_out_of_pool)
};

struct CachingAllocator::Pool {
  PoolId id;
  std::vector<std::unique_ptr<Segment>> segments;
  std::set<Block*, FreeOrder> free_blocks;
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t live_blocks = 0;
  // Note [Free segments of pools no graph captured]: a capture allocated here.
  bool captured = false;
};

// Owned by a Storage; frees the block when the storage lets go of it.
class CachingAllocator::BlockOwner : public MemoryOwner {
 public:
  BlockOwner(CachingAllocator* allocator, Block* block) : allocator_(allocator), block_(block) {
    block_->owner = this;
  }
  ~BlockOwner() override {
    if (block_ != nullptr) allocator_->free_block(block_);
  }
  // The allocator took the block back itself (restore, release_pool).
  void detach() { block_ = nullptr; }
  bool holds_memory() const override { return block_ != nullptr; }

 private:
  CachingAllocator* allocator_;
  Block* block_;
};

bool CachingAllocator::FreeOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream.impl != b->stream.impl) return a->stream.impl < b->stream.impl;
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

namespace {

size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

thread_local std::vector<std::pair<const void*, PoolId>> t_pool_routing;

}  // namespace

size_t PoolCheckpoint::allocated_blocks() const {
  size_t count = 0;
  for (const auto& segment : segments) {
    for (const auto& block : segment.blocks) count += block.allocated ? 1 : 0;
  }
  return count;
}

CachingAllocator::CachingAllocator(Platform& platform) : platform_(platform) {
  auto pool = std::make_unique<Pool>();
  pool->id = kDefaultPool;
  pools_.emplace(0, std::move(pool));
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, pool] : pools_) {
    detach_owners_locked(*pool);
    while (!pool->segments.empty()) release_segment_locked(*pool, pool->segments.back().get());
  }
}

CachingAllocator::Pool& CachingAllocator::pool_locked(PoolId id) {
  auto it = pools_.find(id.value);
  GROVE_CHECK(it != pools_.end(), "memory pool ", id.value,
              " does not exist (released already?): create pools with create_pool()");
  return *it->second;
}

const CachingAllocator::Pool& CachingAllocator::pool_locked(PoolId id) const {
  return const_cast<CachingAllocator*>(this)->pool_locked(id);
}

PoolId CachingAllocator::current_pool() const {
  for (auto it = t_pool_routing.rbegin(); it != t_pool_routing.rend(); ++it) {
    if (it->first == this) return it->second;
  }
  return kDefaultPool;
}

StoragePtr CachingAllocator::allocate(size_t bytes, StreamHandle stream) {
  Device device = platform_.device();
  if (bytes == 0) return std::make_shared<Storage>(nullptr, 0, device, nullptr);
  PoolId pool_id = current_pool();
  if (pool_id.is_default() && platform_.capture_status(stream) != CaptureStatus::kNone) {
    platform_.invalidate_capture(stream);
    throw CaptureViolation(str_cat(
        "allocation of ", bytes, " bytes on ", device.str(),
        " during stream capture outside the capture's private pool; the capture is invalidated. "
        "Allocate before capturing, or route allocations to the capture pool "
        "(begin_allocate_to_pool)"));
  }
  size_t size = round_up(std::max<size_t>(bytes, 1), kAlignment);
  const bool capturing =
      !pool_id.is_default() && platform_.capture_status(stream) != CaptureStatus::kNone;
  StoragePtr storage;
  size_t block_size = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& pool = pool_locked(pool_id);
    if (capturing) pool.captured = true;
    Block* block = find_free_block_locked(pool, size, stream);
    if (block == nullptr) block = new_segment_locked(pool, size, stream);
    split_locked(pool, block, size);
    mark_allocated_locked(pool, block);
    block_size = block->size;
    auto owner = std::make_unique<BlockOwner>(this, block);
    storage = std::make_shared<Storage>(block->address, bytes, device, std::move(owner));
    block->storage = storage;
  }
  // Outside the lock: where sim's hazard checker throws, the storage frees the block again.
  platform_.note_block_allocated(storage->address(), block_size, stream, /*handed_out=*/true);
  return storage;
}

std::vector<size_t> CachingAllocator::move_blocks_out_of_pool(
    PoolId pool_id, const std::unordered_set<const void*>& kept, StreamHandle stream) {
  std::vector<StoragePtr> moving;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& pool = pool_locked(pool_id);
    for (const std::unique_ptr<Segment>& segment : pool.segments) {
      for (Block* block = segment->first; block != nullptr; block = block->next) {
        if (!block->allocated || block->owner == nullptr || kept.count(block->address) > 0) {
          continue;
        }
        if (StoragePtr storage = block->storage.lock()) moving.push_back(std::move(storage));
      }
    }
  }
  std::vector<size_t> moved;
  for (const StoragePtr& storage : moving) {
    const size_t bytes = storage->nbytes();
    StoragePtr copy;
    begin_allocate_to_pool(kDefaultPool);
    try {
      copy = allocate(bytes, stream);
    } catch (...) {
      end_allocate_to_pool(kDefaultPool);
      throw;
    }
    end_allocate_to_pool(kDefaultPool);
    platform_.copy_async(copy->data(), storage->data(), bytes, CopyKind::kDeviceToDevice, stream);
    storage->rebind(copy->data(), copy->release_owner());  // frees the pool block
    moved.push_back(bytes);
  }
  return moved;
}

void CachingAllocator::reserve(PoolId pool_id, size_t bytes, StreamHandle stream) {
  GROVE_CHECK(!pool_id.is_default(),
              "reserve(): the default pool grows on demand; reserve memory for a private pool");
  GROVE_CHECK(bytes > 0, "reserve(): reserve at least one byte");
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& pool = pool_locked(pool_id);
  Block* block = new_segment_locked(pool, round_up(bytes, kAlignment), stream);
  pool.free_blocks.insert(block);
}

CachingAllocator::Block* CachingAllocator::find_free_block_locked(Pool& pool, size_t size,
                                                                  StreamHandle stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.address = nullptr;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end() || (*it)->stream.impl != stream.impl) return nullptr;
  Block* block = *it;
  pool.free_blocks.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment_locked(Pool& pool, size_t size,
                                                              StreamHandle stream) {
  size_t segment_size = size <= kSmallSize ? kSmallSegment : round_up(size, kLargeRounding);
  void* base = nullptr;
  // An injected failure fails the whole segment request, retry included, so
  // that a test injecting one failure sees exactly one OutOfMemoryError.
  bool injected = injected_failures_ > 0;
  if (injected) --injected_failures_;
  std::string device_message;  // why the device refused, e.g. its limit
  auto try_allocate = [&]() -> bool {
    if (injected) return false;
    try {
      base = platform_.allocate_raw(segment_size);
      return true;
    } catch (const OutOfMemoryError& error) {
      device_message = error.what();
      return false;
    }
  };
  if (!try_allocate() && !injected) {
    // Give cached, fully free segments of the default pool back, and those
    // of pools no graph captured (Note [Free segments of pools no graph
    // captured]), and try once more.
    for (auto& [id, other] : pools_) {
      if (!other->id.is_default() && other->captured) continue;
      for (size_t i = other->segments.size(); i-- > 0;) {
        Segment* segment = other->segments[i].get();
        if (!segment->first->allocated && segment->first->next == nullptr) {
          release_segment_locked(*other, segment);
        }
      }
    }
    try_allocate();
  }
  if (base == nullptr) {
    // Note [Out of memory is PyTorch's out of memory] (python/grove/_capi.py):
    // the words PyTorch's own message begins with, on a cuda device.
    throw OutOfMemoryError(
        str_cat(platform_.device().is_cuda() ? "CUDA out of memory. " : "", "out of memory on ",
                platform_.device().str(), ": could not ", "reserve a segment of ", segment_size,
                " bytes for a request of ", size, " bytes in pool ", pool.id.value, " (",
                pool.allocated_bytes, " bytes allocated in that pool)",
                injected ? " [injected failure]" : "",
                device_message.empty() ? "" : " (" + device_message + ")",
                "; free tensors you no longer need or call empty_cache()"));
  }
  auto segment = std::make_unique<Segment>();
  segment->base = base;
  segment->size = segment_size;
  segment->stream = stream;
  segment->pool = &pool;
  auto* block = new Block();
  block->segment = segment.get();
  block->address = static_cast<char*>(base);
  block->size = segment_size;
  block->stream = stream;
  segment->first = block;
  // Keep segments sorted by address so checkpoints are deterministic.
  auto position = std::lower_bound(
      pool.segments.begin(), pool.segments.end(), base,
      [](const std::unique_ptr<Segment>& s, void* address) { return s->base < address; });
  pool.segments.insert(position, std::move(segment));
  return block;
}

void CachingAllocator::split_locked(Pool& pool, Block* block, size_t size) {
  if (block->size - size < kAlignment) return;
  auto* rest = new Block();
  rest->segment = block->segment;
  rest->address = block->address + size;
  rest->size = block->size - size;
  rest->stream = block->stream;
  rest->previous = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->previous = rest;
  block->next = rest;
  block->size = size;
  pool.free_blocks.insert(rest);
}

void CachingAllocator::mark_allocated_locked(Pool& pool, Block* block) {
  block->allocated = true;
  pool.allocated_bytes += block->size;
  pool.peak_allocated_bytes = std::max(pool.peak_allocated_bytes, pool.allocated_bytes);
  ++pool.live_blocks;
}

void CachingAllocator::free_block(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_block_locked(*block->segment->pool, block);
}

void CachingAllocator::free_block_locked(Pool& pool, Block* block) {
  platform_.note_block_freed(block->address);
  block->owner = nullptr;
  block->allocated = false;
  pool.allocated_bytes -= block->size;
  --pool.live_blocks;
  // Coalesce with free neighbours of the same segment.
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.free_blocks.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->previous = block;
    delete next;
  }
  if (Block* previous = block->previous; previous != nullptr && !previous->allocated) {
    pool.free_blocks.erase(previous);
    previous->size += block->size;
    previous->next = block->next;
    if (block->next != nullptr) block->next->previous = previous;
    delete block;
    block = previous;
  }
  pool.free_blocks.insert(block);
}

void CachingAllocator::release_segment_locked(Pool& pool, Segment* segment) {
  for (Block* block = segment->first; block != nullptr;) {
    Block* next = block->next;
    if (block->allocated) {
      if (block->owner != nullptr) block->owner->detach();
      platform_.note_block_freed(block->address);
      pool.allocated_bytes -= block->size;
      --pool.live_blocks;
    } else {
      pool.free_blocks.erase(block);
    }
    delete block;
    block = next;
  }
  platform_.free_raw(segment->base);
  auto it = std::find_if(pool.segments.begin(), pool.segments.end(),
                         [&](const std::unique_ptr<Segment>& s) { return s.get() == segment; });
  pool.segments.erase(it);
}

void CachingAllocator::detach_owners_locked(Pool& pool) {
  for (auto& segment : pool.segments) {
    for (Block* block = segment->first; block != nullptr; block = block->next) {
      if (block->owner != nullptr) {
        block->owner->detach();
        block->owner = nullptr;
      }
    }
  }
}

PoolId CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto pool = std::make_unique<Pool>();
  pool->id = PoolId{next_pool_id_++};
  PoolId id = pool->id;
  pools_.emplace(id.value, std::move(pool));
  return id;
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_locked(pool);
  }
  t_pool_routing.emplace_back(this, pool);
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  for (auto it = t_pool_routing.rbegin(); it != t_pool_routing.rend(); ++it) {
    if (it->first != this) continue;
    GROVE_CHECK(it->second == pool, "end_allocate_to_pool(", pool.value,
                ") does not match the innermost routing, which is to pool ", it->second.value);
    t_pool_routing.erase(std::next(it).base());
    return;
  }
  throw Error(str_cat("end_allocate_to_pool(", pool.value,
                      ") without a matching begin_allocate_to_pool on this thread"));
}

void CachingAllocator::release_pool(PoolId pool_id) {
  GROVE_CHECK(!pool_id.is_default(), "the default pool cannot be released; use empty_cache()");
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& pool = pool_locked(pool_id);
  while (!pool.segments.empty()) release_segment_locked(pool, pool.segments.back().get());
  pools_.erase(pool_id.value);
}

PoolCheckpoint CachingAllocator::checkpoint(PoolId pool_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Pool& pool = pool_locked(pool_id);
  PoolCheckpoint result;
  result.pool = pool_id;
  for (const auto& segment : pool.segments) {
    SegmentState state;
    state.base = segment->base;
    state.size = segment->size;
    state.stream = segment->stream;
    for (const Block* block = segment->first; block != nullptr; block = block->next) {
      state.blocks.push_back(
          BlockState{static_cast<size_t>(block->address - static_cast<char*>(segment->base)),
                     block->size, block->allocated, block->stream});
    }
    result.segments.push_back(std::move(state));
  }
  return result;
}

void CachingAllocator::restore(PoolId pool_id, const PoolCheckpoint& checkpoint,
                               const std::vector<StoragePtr>& live_storages) {
  GROVE_CHECK(checkpoint.pool == pool_id, "restore of pool ", pool_id.value,
              " from a checkpoint of pool ", checkpoint.pool.value);
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& pool = pool_locked(pool_id);

  // Check everything before changing anything: a rejected restore leaves the pool as it was.
  std::unordered_map<const void*, size_t> existing_segments;
  for (const auto& segment : pool.segments) existing_segments.emplace(segment->base, segment->size);
  std::unordered_set<const void*> checkpoint_allocated;
  for (const SegmentState& state : checkpoint.segments) {
    auto it = existing_segments.find(state.base);
    GROVE_CHECK(it != existing_segments.end() && it->second == state.size, "restore of pool ",
                pool_id.value, ": the checkpoint's segment at ", state.base, " (", state.size,
                " bytes) no longer exists; the checkpoint is stale (take a new one)");
    for (const BlockState& block : state.blocks) {
      if (block.allocated) {
        checkpoint_allocated.insert(static_cast<const char*>(state.base) + block.offset);
      }
    }
  }
  for (const StoragePtr& storage : live_storages) {
    GROVE_CHECK(storage != nullptr, "restore of pool ", pool_id.value, ": a live storage is null");
    GROVE_CHECK(checkpoint_allocated.count(storage->address()) != 0, "restore of pool ",
                pool_id.value, ": a live storage at ", storage->address(),
                " is not an allocated block of the checkpoint; pass only storages that were "
                "alive when the checkpoint was taken");
  }

  detach_owners_locked(pool);
  // Segments the checkpoint does not know go back to the platform; the rest are rebuilt.
  for (size_t i = pool.segments.size(); i-- > 0;) {
    Segment* segment = pool.segments[i].get();
    bool known = std::any_of(checkpoint.segments.begin(), checkpoint.segments.end(),
                             [&](const SegmentState& s) { return s.base == segment->base; });
    if (!known) release_segment_locked(pool, segment);
  }

  pool.free_blocks.clear();
  pool.allocated_bytes = 0;
  pool.live_blocks = 0;
  std::unordered_map<const void*, Block*> allocated_by_address;
  std::unordered_map<const void*, const SegmentState*> state_by_base;
  for (const SegmentState& state : checkpoint.segments) state_by_base.emplace(state.base, &state);
  for (const auto& owned_segment : pool.segments) {
    Segment* segment = owned_segment.get();
    const SegmentState& state = *state_by_base.at(segment->base);
    for (Block* block = segment->first; block != nullptr;) {
      Block* next = block->next;
      if (block->allocated) platform_.note_block_freed(block->address);
      delete block;
      block = next;
    }
    segment->first = nullptr;
    Block* previous = nullptr;
    for (const BlockState& block_state : state.blocks) {
      auto* block = new Block();
      block->segment = segment;
      block->address = static_cast<char*>(segment->base) + block_state.offset;
      block->size = block_state.size;
      block->stream = block_state.stream;
      block->previous = previous;
      if (previous != nullptr) {
        previous->next = block;
      } else {
        segment->first = block;
      }
      previous = block;
      if (block_state.allocated) {
        mark_allocated_locked(pool, block);
        platform_.note_block_allocated(block->address, block->size, block->stream,
                                       /*handed_out=*/false);
        allocated_by_address.emplace(block->address, block);
      } else {
        pool.free_blocks.insert(block);
      }
    }
  }

  for (const StoragePtr& storage : live_storages) {
    auto it = allocated_by_address.find(storage->address());
    if (it->second->owner == nullptr) {
      storage->set_owner(std::make_unique<BlockOwner>(this, it->second));
      it->second->storage = storage;
    }
  }
  // Blocks no live storage claims belonged to outputs that died since: free them.
  for (auto& [address, block] : allocated_by_address) {
    if (block->owner == nullptr) free_block_locked(pool, block);
  }
}

PoolStats CachingAllocator::stats(PoolId pool_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Pool& pool = pool_locked(pool_id);
  PoolStats stats;
  for (const auto& segment : pool.segments) stats.reserved_bytes += segment->size;
  stats.allocated_bytes = pool.allocated_bytes;
  stats.peak_allocated_bytes = pool.peak_allocated_bytes;
  stats.segments = pool.segments.size();
  stats.live_blocks = pool.live_blocks;
  stats.free_blocks = pool.free_blocks.size();
  return stats;
}

std::optional<PoolId> CachingAllocator::pool_containing(const void* address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* byte = static_cast<const char*>(address);
  for (const auto& [id, pool] : pools_) {
    for (const auto& segment : pool->segments) {
      const char* base = static_cast<const char*>(segment->base);
      if (byte >= base && byte < base + segment->size) return pool->id;
    }
  }
  return std::nullopt;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  Pool& pool = pool_locked(kDefaultPool);
  for (size_t i = pool.segments.size(); i-- > 0;) {
    Segment* segment = pool.segments[i].get();
    if (!segment->first->allocated && segment->first->next == nullptr) {
      release_segment_locked(pool, segment);
    }
  }
}

void CachingAllocator::inject_allocation_failures(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  injected_failures_ = count;
}

}  // namespace grove::runtime
