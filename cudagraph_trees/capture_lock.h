// The process-wide lock that serialises warm-ups, recordings and shutdowns of
// every tree manager: they change process-wide state (allocator routing,
// stream capture). Replays never take it.
#pragma once

#include <mutex>

namespace grove::cudagraph_trees {

std::mutex& process_capture_lock();

}  // namespace grove::cudagraph_trees
