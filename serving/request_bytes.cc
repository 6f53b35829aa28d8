#include "serving/request_bytes.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/device_context.h"
#include "runtime/pinned_host_buffer.h"

namespace grove::serving {
namespace {

constexpr size_t kSmallestBlock = 256;
constexpr size_t kChunkBytes = size_t{1} << 20;  // pinned memory is asked for in chunks

size_t block_size(size_t bytes) { return std::max(kSmallestBlock, std::bit_ceil(bytes)); }

class Pool {
 public:
  void* allocate(size_t bytes) {
    const size_t size = block_size(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    std::deque<void*>& free = free_[size];
    if (free.empty()) grow(size, free);
    void* block = free.front();
    free.pop_front();
    return block;
  }

  void release(void* pointer, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[block_size(bytes)].push_back(pointer);  // first freed, first handed out again
  }

  // Note [Pinned blocks cached per thread]: up to `count` blocks of `size`
  // appended to `blocks` under one lock (the pool grows as allocate() does).
  void take(size_t size, size_t count, std::vector<void*>& blocks) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::deque<void*>& free = free_[size];
    if (free.empty()) grow(size, free);
    for (size_t i = 0; i < count && !free.empty(); ++i) {
      blocks.push_back(free.front());
      free.pop_front();
    }
  }

  // The first `count` of `blocks` back to the pool under one lock.
  void give(size_t size, std::vector<void*>& blocks, size_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::deque<void*>& free = free_[size];
    free.insert(free.end(), blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(count));
    blocks.erase(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(count));
  }

  bool contains(const void* pointer) {
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    std::lock_guard<std::mutex> lock(mutex_);
    auto after = chunks_.upper_bound(address);
    if (after == chunks_.begin()) return false;
    auto chunk = std::prev(after);
    return address < chunk->first + chunk->second.size();
  }

 private:
  void grow(size_t size, std::deque<void*>& free) {
    // Pinned memory of the default device is portable: every device copies from it.
    runtime::PinnedHostBuffer chunk(runtime::default_device(), std::max(size, kChunkBytes));
    for (size_t at = 0; at + size <= chunk.size(); at += size) free.push_back(chunk.data() + at);
    const auto base = reinterpret_cast<uintptr_t>(chunk.data());
    chunks_.emplace(base, std::move(chunk));
  }

  std::mutex mutex_;
  std::map<size_t, std::deque<void*>> free_;               // by block size
  std::map<uintptr_t, runtime::PinnedHostBuffer> chunks_;  // by address, kept until exit
};

// Never destroyed: blocks may be released during exit, and pinned memory is
// not handed back to a driver that may already be gone.
Pool& pool() {
  static Pool* instance = new Pool;
  return *instance;
}

// Note [Pinned blocks cached per thread]
// Every request's rows and every answer's rows are a block of the pool, taken
// on one thread and often given back on another (a front thread decodes a
// request, the worker frees it; the worker writes an answer, a front thread
// frees it): four turns of the pool's one mutex per request, from every front
// thread and the worker at once. So each thread keeps the blocks of up to
// kCachedBlockBytes it frees in a cache of its own, per size, and takes and
// gives blocks from and to the pool kMagazineBytes' worth at a time (at
// least one block), under one lock; a thread holds at most two such
// magazines per size (128 KiB a size), and gives back all it holds when it
// ends; a block freed later while the thread ends (another thread_local's
// rows) goes straight to the pool. Larger blocks go to the pool each time. Test: PinnedRowPool.*
// (blocks taken and freed on different threads are never handed out twice at once).
constexpr size_t kCachedBlockBytes = size_t{64} << 10;
constexpr size_t kMagazineBytes = size_t{64} << 10;
constexpr size_t kCachedSizes = std::bit_width(kCachedBlockBytes / kSmallestBlock);

// Set once this thread's cache is gone; trivially destructible, so still
// readable while the thread's other thread_locals are destroyed.
thread_local bool thread_cache_gone = false;

class ThreadCache {
 public:
  ~ThreadCache() {
    for (size_t i = 0; i < kCachedSizes; ++i) {
      if (!blocks_[i].empty()) pool().give(kSmallestBlock << i, blocks_[i], blocks_[i].size());
    }
    thread_cache_gone = true;
  }

  void* allocate(size_t size) {
    const size_t i = index(size);
    std::vector<void*>& blocks = blocks_[i];
    if (blocks.empty()) pool().take(size, magazine(size), blocks);
    void* block = blocks.back();
    blocks.pop_back();
    return block;
  }

  void release(void* pointer, size_t size) {
    std::vector<void*>& blocks = blocks_[index(size)];
    blocks.push_back(pointer);
    if (blocks.size() >= 2 * magazine(size)) pool().give(size, blocks, magazine(size));
  }

 private:
  static size_t index(size_t size) {
    return static_cast<size_t>(std::countr_zero(size / kSmallestBlock));
  }
  static size_t magazine(size_t size) { return std::max<size_t>(1, kMagazineBytes / size); }

  std::vector<void*> blocks_[kCachedSizes];
};

// This thread's cache; nullptr once it is gone.
ThreadCache* thread_cache() {
  if (thread_cache_gone) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

}  // namespace

void* PinnedRowPool::allocate(size_t bytes) {
  if (bytes > kLargestBlock) return ::operator new(bytes);
  const size_t size = block_size(bytes);
  ThreadCache* cache = size <= kCachedBlockBytes ? thread_cache() : nullptr;
  return cache != nullptr ? cache->allocate(size) : pool().allocate(bytes);
}

void PinnedRowPool::release(void* pointer, size_t bytes) {
  if (pointer == nullptr) return;
  if (bytes > kLargestBlock) {
    ::operator delete(pointer);
    return;
  }
  const size_t size = block_size(bytes);
  ThreadCache* cache = size <= kCachedBlockBytes ? thread_cache() : nullptr;
  if (cache != nullptr) return cache->release(pointer, size);
  pool().release(pointer, bytes);
}

bool PinnedRowPool::contains(const void* pointer) { return pool().contains(pointer); }

void assign_row_bytes(RowBytes& bytes, const uint8_t* data, size_t size) {
  bytes.resize(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
}

}  // namespace grove::serving
