// Stream capture whose allocations go to a private pool, for GraphRecording
// and WhileGraph: the two steps (route the device's allocator into the pool,
// put the stream in capture mode) begin together, end together and are
// undone together.
#pragma once

#include "runtime/caching_allocator.h"
#include "runtime/platform.h"

namespace grove::runtime {

// Routes allocations into `pool` and starts capturing `stream`; the routing
// is undone when the capture cannot start.
void begin_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                          PoolId pool, CaptureMode mode);

// Ends both and returns the captured graph. The stream leaves capture mode
// even when the routing cannot be ended (captured code left an inner
// begin_allocate_to_pool open): that error is thrown after the graph is
// destroyed. An invalidated capture throws from the platform.
GraphHandle end_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                               PoolId pool);

// Ends both, ignoring every error, and destroys what was captured.
void abort_pooled_capture(Platform& platform, CachingAllocator& allocator, StreamHandle stream,
                          PoolId pool) noexcept;

}  // namespace grove::runtime
