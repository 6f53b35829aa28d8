// The sim platform's streams and events, and its captures: which captures are
// active, the calls CUDA forbids during one, and how one ends (Note [Sim
// execution model] in sim_platform.cc). Internal to runtime/sim.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/platform.h"
#include "runtime/sim/sim_graph.h"
#include "runtime/sim/stream_worker.h"

namespace grove::runtime::sim {

struct SimStream;

struct Capture {
  SimGraph graph;
  CaptureMode mode = CaptureMode::kGlobal;
  std::thread::id thread;
  bool invalidated = false;
  std::string reason;
  SimStream* origin = nullptr;
  std::set<SimStream*> streams;  // origin and every stream that joined
};

struct SimStream {
  Capture* capture = nullptr;
  std::vector<size_t> frontier;  // last captured nodes of this stream
  // Async mode only (Note [Asynchronous sim streams]). Shared with the events
  // recorded on the stream and the waits queued on other streams, so it
  // outlives a destroyed stream's work.
  std::shared_ptr<StreamWorker> worker;
};

struct SimEvent {
  bool timing = false;
  // When the record ran, in steady-clock nanoseconds (written by a worker in async mode).
  std::shared_ptr<std::atomic<int64_t>> time = std::make_shared<std::atomic<int64_t>>(0);
  bool recorded = false;
  Capture* capture = nullptr;  // set when recorded on a capturing stream
  std::vector<size_t> frontier;
  // Async mode: the worker and ticket of the last record's marker.
  std::shared_ptr<StreamWorker> worker;
  uint64_t ticket = 0;
};

// The active captures of one device.
class CaptureRegistry {
 public:
  explicit CaptureRegistry(Device device) : device_(device) {}

  // Starts a capture on `origin` (checked by the caller to be capturable).
  void begin(SimStream& origin, CaptureMode mode);
  // Ends `origin`'s capture: every member stream leaves it, and the capture is
  // invalidated when a joined stream was not joined back. The caller throws
  // when it is invalidated, after forgetting the capture's events.
  std::unique_ptr<Capture> end(SimStream& origin);

  // Throws CaptureViolation when `capture` was invalidated.
  void check_usable(const Capture* capture) const;
  // Invalidates `capture` (keeping its first reason) and throws CaptureViolation.
  [[noreturn]] void violate(Capture* capture, const std::string& what) const;
  // Unsafe calls are forbidden while a capture is active in global mode
  // anywhere, or in thread-local mode on the calling thread: violates it.
  void forbid(const std::string& what);

 private:
  Device device_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Capture>> captures_;
};

}  // namespace grove::runtime::sim
