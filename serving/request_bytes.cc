#include "serving/request_bytes.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>

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

}  // namespace

void* PinnedRowPool::allocate(size_t bytes) {
  if (bytes > kLargestBlock) return ::operator new(bytes);
  return pool().allocate(bytes);
}

void PinnedRowPool::release(void* pointer, size_t bytes) {
  if (pointer == nullptr) return;
  if (bytes > kLargestBlock) {
    ::operator delete(pointer);
    return;
  }
  pool().release(pointer, bytes);
}

bool PinnedRowPool::contains(const void* pointer) { return pool().contains(pointer); }

}  // namespace grove::serving
