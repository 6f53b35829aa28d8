// ReadBufferAllocator: the allocator of the HTTP front's read buffers, which
// keeps the blocks a thread frees for that thread's next buffers (Note [Read
// buffers kept by their loop]).
//
//   boost::beast::basic_flat_buffer<ReadBufferAllocator<char>> buffer;
#pragma once

#include <cstddef>

namespace grove::serving {

// A block of at least `bytes` (any thread); the same `bytes` give it back.
void* take_read_buffer(size_t bytes);
void give_read_buffer(void* block, size_t bytes);
// Bytes this thread keeps for its next buffers (tests).
size_t read_buffer_bytes_kept();

template <typename T>
struct ReadBufferAllocator {
  using value_type = T;
  ReadBufferAllocator() = default;
  template <typename U>
  ReadBufferAllocator(const ReadBufferAllocator<U>&) {}
  T* allocate(size_t count) { return static_cast<T*>(take_read_buffer(count * sizeof(T))); }
  void deallocate(T* block, size_t count) { give_read_buffer(block, count * sizeof(T)); }
  template <typename U>
  friend bool operator==(const ReadBufferAllocator&, const ReadBufferAllocator<U>&) {
    return true;
  }
};

}  // namespace grove::serving
