#include "serving/read_buffer_cache.h"

#include <bit>
#include <new>
#include <vector>

namespace grove::serving {
namespace {

// Note [Read buffers kept by their loop]
// A connection reads each request into a buffer of 16 KiB or more (Note
// [Read sizes]) and frees it once the answer is written, so that an idle
// connection holds none (Note [Connections without threads]). From glibc
// that is a large block per request: past its thread caches, merged with
// its neighbours when freed, and each free that leaves 64 KiB or more free
// consolidates the heap (Note [Freed memory kept by the serving process]).
// So the buffers' blocks come in powers of two from 4 KiB to 128 KiB, and
// the thread that frees one keeps it for its own next buffers, up to
// kKeptBytesPerSize per size (a loop thread at most 1.5 MiB in all;
// larger or further blocks go back to the heap). A connection lives on one
// loop, so a loop's buffers come back to that loop. An idle connection
// still holds no buffer; the loop holds at most the kept blocks. With Note
// [A response head without allocations] and Note [Response fields without
// allocations], the HTTP loops' allocations per answer (perf's malloc
// probe, serve_http on sim) fell from 22.9 to 17.0 (JSON) and 29.0 to 19.0
// (binary); the three together took the front's CPU per answer from 37.9
// to 34.3 us (JSON) and 20.6 to 17.1 us (binary), median of six alternated
// runs on 2 shared cores whose run-to-run spread is about 10% (CPU only;
// GPU confirmation owed). Tests:
// ReadBufferCache.* (tests/serving/read_buffer_cache_test.cc), every HTTP
// test (tests/serving/http_server_test.py, http_abuse_test.py).
constexpr size_t kSmallestBlock = size_t{4} << 10;
constexpr size_t kLargestBlock = size_t{128} << 10;
constexpr size_t kKeptBytesPerSize = size_t{256} << 10;
constexpr size_t kSizes = std::bit_width(kLargestBlock / kSmallestBlock);

size_t block_size(size_t bytes) {
  return std::bit_ceil(bytes < kSmallestBlock ? kSmallestBlock : bytes);
}
size_t size_index(size_t size) {
  return static_cast<size_t>(std::countr_zero(size / kSmallestBlock));
}

// Set once this thread's cache is gone (trivially destructible: readable
// while the thread's other thread_locals are destroyed).
thread_local bool cache_gone = false;

class Cache {
 public:
  ~Cache() {
    for (std::vector<void*>& blocks : blocks_) {
      for (void* block : blocks) ::operator delete(block);
    }
    cache_gone = true;
  }
  void* take(size_t size) {
    std::vector<void*>& blocks = blocks_[size_index(size)];
    if (blocks.empty()) return ::operator new(size);
    void* block = blocks.back();
    blocks.pop_back();
    return block;
  }
  void give(void* block, size_t size) {
    std::vector<void*>& blocks = blocks_[size_index(size)];
    if ((blocks.size() + 1) * size > kKeptBytesPerSize) return ::operator delete(block);
    blocks.push_back(block);
  }
  size_t kept() const {
    size_t bytes = 0;
    for (size_t i = 0; i < kSizes; ++i) bytes += blocks_[i].size() * (kSmallestBlock << i);
    return bytes;
  }

 private:
  std::vector<void*> blocks_[kSizes];
};

Cache* cache() {
  if (cache_gone) return nullptr;
  thread_local Cache instance;
  return &instance;
}

}  // namespace

void* take_read_buffer(size_t bytes) {
  if (bytes > kLargestBlock) return ::operator new(bytes);
  const size_t size = block_size(bytes);
  Cache* kept = cache();
  return kept != nullptr ? kept->take(size) : ::operator new(size);
}

void give_read_buffer(void* block, size_t bytes) {
  if (block == nullptr) return;
  Cache* kept = bytes <= kLargestBlock ? cache() : nullptr;
  if (kept == nullptr) return ::operator delete(block);
  kept->give(block, block_size(bytes));
}

size_t read_buffer_bytes_kept() {
  Cache* kept = cache();
  return kept != nullptr ? kept->kept() : 0;
}

}  // namespace grove::serving
