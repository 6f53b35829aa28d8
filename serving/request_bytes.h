// RowBytes holds the bytes of a request's (or a response's) rows in
// page-locked host memory from one process-wide pool, so that the device
// copies them straight from where the protocol front decoded them.
//
// Note [Request bytes copied once]
// A served request's tensor bytes are written once on the host and copied
// once to the device: the front (JSON, the binary extension, gRPC) decodes
// them straight into the request's HostRows, whose RowBytes live in pinned
// memory from PinnedRowPool, and the worker puts a batch's rows into its
// bucket's device inputs in one copy per input (Note [One input copy per
// batch], device_worker.h): straight from there when the batch's rows lie in
// one run, else gathered on the host into the batch's pinned staging first.
// Copies from pinned memory are asynchronous, so Note [Asynchronous staging]
// holds. The pool hands blocks of a size out first-freed first, so the
// requests of a batch, freed together, come back in order and a later batch's
// rows may lie next to each other. The pool keeps the pinned memory it grew
// to (the peak of rows in flight, rounded up to powers of two) until the
// process exits. Rows larger than its largest block (kLargestBlock) live in
// pageable memory; they are still copied once, synchronously. ServerStats
// counts the request bytes copied to the device and the copies it took.
// Tests:
// ServerTest.RequestBytesAreCopiedOnceToTheDevice,
// KserveProtocol.DecodedRowsLieInPinnedMemory (JSON and binary),
// KserveGrpcProtocol.EachDatatypeReadsItsTypedFieldOrRawBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace grove::serving {

class PinnedRowPool {
 public:
  // Blocks come in powers of two from 256 bytes to kLargestBlock.
  static constexpr size_t kLargestBlock = size_t{64} << 20;

  // `bytes` of host memory: pinned for sizes up to kLargestBlock. Thread-safe.
  static void* allocate(size_t bytes);
  static void release(void* pointer, size_t bytes);
  // Whether `pointer` lies in a pinned block of the pool (tests, checks).
  static bool contains(const void* pointer);
};

template <typename T>
struct PinnedRowAllocator {
  using value_type = T;
  PinnedRowAllocator() = default;
  template <typename U>
  PinnedRowAllocator(const PinnedRowAllocator<U>&) {}
  T* allocate(size_t count) { return static_cast<T*>(PinnedRowPool::allocate(count * sizeof(T))); }
  void deallocate(T* pointer, size_t count) { PinnedRowPool::release(pointer, count * sizeof(T)); }
  template <typename U>
  friend bool operator==(const PinnedRowAllocator&, const PinnedRowAllocator<U>&) {
    return true;
  }
};

using RowBytes = std::vector<uint8_t, PinnedRowAllocator<uint8_t>>;

// Note [Row bytes copied in one call]
// Makes `bytes` hold the `size` bytes at `data`, with one memcpy. RowBytes'
// own assign(first, last) copies a byte at a time: libstdc++ fills memory of
// an allocator other than std::allocator an element at a time, through the
// allocator, and a loop over uint8_t pointers that may alias stays a loop.
// Writing an mlp16x512 answer's 2 KiB row that way was about 95% of the
// batching worker's answer() on sim, about 1.7 us of its time per row on
// the H100 (100-160 us a batch of 64). Every copy of bytes into RowBytes goes
// through this. Test: RequestBytes.AssignRowBytesCopiesExactly.
void assign_row_bytes(RowBytes& bytes, const uint8_t* data, size_t size);

}  // namespace grove::serving
