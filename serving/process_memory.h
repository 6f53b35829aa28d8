// How a serving process's allocator treats memory its threads free: called
// once by the programs that serve (grove serve, benchmarks/serve_http), never
// by the library on its own, since it sets a process-wide allocator option.
//
//   keep_freed_memory_for_serving();  // first thing in main, before threads start
#pragma once

#include <cstddef>

namespace grove::serving {

// Note [Freed memory kept by the serving process]: glibc hands the free top
// of a heap back to the kernel only past `keep_bytes` (its trim threshold),
// instead of past 128 KiB. GROVE_SERVE_TRIM_AS_BEFORE=1 leaves glibc's
// default. Returns whether the option was set.
bool keep_freed_memory_for_serving(size_t keep_bytes = size_t{32} << 20);

}  // namespace grove::serving
