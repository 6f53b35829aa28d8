// The lock that serialises warm-ups, recordings and shutdowns of every tree
// manager of one device: they change that device's state (its allocator's pool
// routing, stream capture on its streams). Replays never take it.
//
// Note [One capture lock per device]: the lock is per device, not per process.
// Captures are thread-local (runtime::CaptureMode::kThreadLocal), and what a
// warm-up or recording changes (allocator, pools, capture stream, legacy
// default stream) belongs to one device, so managers of different devices
// never need to wait for each other. They must not: data-parallel ranks are
// threads, one device each, and a rank that waits for its device under the
// lock (a free, a synchronizing copy) while its stream waits in an NCCL
// all-reduce for a rank blocked on the same lock deadlocks; `grove run --train
// --gpus N --backend cudagraphs` hung that way on cuda (issue 37). Test:
// TreeThreadsShutdown.WarmupsOfDifferentDevicesRunAtTheSameTime.
#pragma once

#include <mutex>

#include "runtime/device.h"

namespace grove::cudagraph_trees {

std::mutex& capture_lock(runtime::Device device);

}  // namespace grove::cudagraph_trees
