#include "serving/process_memory.h"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace grove::serving {

// Note [Freed memory kept by the serving process]
// The HTTP front allocates and frees tens of KiB per request on each loop
// (a 16 KiB read buffer, the request body, the answer), and the answer's rows
// cross threads. Whenever a free leaves 64 KiB or more free in one piece,
// glibc consolidates its small free chunks and, when the free top of that
// thread's heap passes the trim threshold (128 KiB by default), gives the
// pages back to the kernel (madvise), which the next requests fault in again
// (zeroed): on sim, perf put about 5% of the HTTP loops' CPU in page faults
// and madvise and 9% in malloc and free. A serving process reaches its peak
// of requests in flight again and again, so `grove serve` and serve_http keep
// up to 32 MiB of free top per heap (M_TRIM_THRESHOLD; a larger free top is
// still trimmed down to it). CPU measured on sim (2 shared cores, so CPU
// time only; GPU confirmation owed): serve_http, gelu512, max batch 64,
// 12,000/s offered, the front's CPU per answer, median of six runs
// alternated with GROVE_SERVE_TRIM_AS_BEFORE=1 in one script: JSON 34.3 ->
// 29.1 us, binary 17.1 -> 15.9 us (before, eight pairs through
// GLIBC_TUNABLES: binary 25.6 -> 22.9 us, 7 of 8 lower); runs of one binary
// spread by about 10%. The cost is resident memory: a heap keeps what it
// once held, up to 32 MiB more than it uses now. Setting the threshold also
// freezes glibc's dynamic mmap threshold at 128 KiB: larger blocks keep
// coming from mmap. GROVE_SERVE_TRIM_AS_BEFORE=1 leaves
// glibc's defaults. Test: ProcessMemory.KeepsFreedMemoryUnlessAskedNotTo
// (tests/serving/process_memory_test.cc).
bool keep_freed_memory_for_serving(size_t keep_bytes) {
  const char* before = std::getenv("GROVE_SERVE_TRIM_AS_BEFORE");
  if (before != nullptr && *before != '\0' && std::string_view(before) != "0") return false;
  return ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(keep_bytes)) == 1;
}

}  // namespace grove::serving
