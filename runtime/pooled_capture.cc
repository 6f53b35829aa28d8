#include "runtime/pooled_capture.h"

#include <exception>

#include "runtime/error.h"

namespace grove::runtime {

void begin_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                          PoolId pool, CaptureMode mode) {
  allocator.begin_allocate_to_pool(pool);
  try {
    platform.begin_capture(stream, mode);
  } catch (...) {
    allocator.end_allocate_to_pool(pool);
    throw;
  }
}

GraphHandle end_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                               PoolId pool) {
  std::exception_ptr routing_error;
  try {
    allocator.end_allocate_to_pool(pool);
  } catch (const Error&) {
    routing_error = std::current_exception();
  }
  GraphHandle graph = platform.end_capture(stream);  // throws when invalidated
  if (routing_error) {
    platform.destroy_graph(graph);
    std::rethrow_exception(routing_error);
  }
  return graph;
}

void abort_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                          PoolId pool) noexcept {
  try {
    allocator.end_allocate_to_pool(pool);
  } catch (...) {
  }
  try {
    platform.destroy_graph(platform.end_capture(stream));
  } catch (...) {
    // An invalidated capture reports itself here; the stream has left capture mode.
  }
}

}  // namespace grove::runtime
