// HazardChecker finds, on sim, the stream-ordering bugs that a GPU turns into
// wrong answers now and then: an operation that touches memory another
// stream's unfinished operation writes (or reads, while it writes) with no
// event ordering the two, and a caching-allocator block handed out again while
// work of another stream that used it may still be pending (Note [Stream
// hazards]). It judges by happens-before, not by timing, so a hazard is
// reported on every run, in synchronous and asynchronous sim alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"
#include "runtime/platform.h"
#include "runtime/sim/sim_graph.h"

namespace grove::runtime::sim {

// kRecord keeps hazards for sim_hazards(); kThrow throws StreamHazardError
// before the second operation runs. GROVE_SIM_CHECK=off|record|throw.
enum class HazardMode { kOff, kRecord, kThrow };

class StreamHazardError : public Error {
 public:
  using Error::Error;
};

struct SimHazard {
  enum class Kind { kUnorderedAccess, kBlockReusedEarly };
  Kind kind = Kind::kUnorderedAccess;
  std::string earlier;  // the pending operation, with its stream
  std::string later;    // the new operation (or the allocation), with its stream
  std::string message;  // what happened and what to do, naming both
};

// [begin, end) of memory an operation reads, or reads and writes.
struct MemoryAccess {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool writes = false;
};

class HazardChecker {
 public:
  explicit HazardChecker(HazardMode mode) : mode_(mode) {}
  HazardMode mode() const { return mode_; }

  // Streams and events are keyed by the platform's own objects. A new stream is
  // ordered after only what the host has seen finish.
  void stream_created(const void* stream, bool legacy_default);
  void stream_destroyed(const void* stream);
  void event_destroyed(const void* event);

  // Checks an operation about to run on `stream` against the pending work of
  // the other streams, then records it as pending. `name` says what it is
  // ("kernel add", "memcpy 256 bytes"); the checker adds its number and stream.
  void operation(const void* stream, const std::string& name,
                 const std::vector<MemoryAccess>& accesses);
  // A kernel's arguments: a slot that points into a live block touches the
  // whole block, as a read and a write (a kernel does not say which it writes).
  std::vector<MemoryAccess> kernel_accesses(const KernelArgs& args) const;

  void event_recorded(const void* event, const void* stream);
  void stream_waited(const void* stream, const void* event);
  // The host saw a stream's, an event's or every stream's work finish.
  void stream_synchronized(const void* stream);
  void event_synchronized(const void* event);
  void device_synchronized();

  // The caching allocator's blocks. `handed_out`: given to a caller on
  // `stream` (checked against pending work that touches it); otherwise only
  // the block map changes (a checkpoint restore).
  void block_allocated(const void* address, size_t bytes, const void* stream, bool handed_out);
  void block_freed(const void* address);

  std::vector<SimHazard> hazards() const;
  void clear_hazards();

 private:
  using Clock = std::vector<uint64_t>;  // per stream id: the last operation ordered before
  struct Pending {
    uint64_t epoch = 0;
    std::string name;
    std::vector<MemoryAccess> accesses;
  };
  struct Overlap {  // the two ranges that conflict
    MemoryAccess earlier;
    MemoryAccess later;
  };
  struct StreamState {
    size_t id = 0;
    std::string name;
    Clock clock;
    std::deque<Pending> pending;  // oldest first; pruned once the host saw them finish
  };

  StreamState& stream_locked(const void* stream);
  void absorb_completed_locked(StreamState& stream);
  // The newest pending operation of another stream that `stream` is not
  // ordered after and that conflicts with `accesses`; its stream and the
  // overlapping ranges go to `owner` and `overlap`.
  const Pending* find_unordered_locked(const StreamState& stream,
                                       const std::vector<MemoryAccess>& accesses,
                                       const StreamState** owner, Overlap* overlap) const;
  void complete_locked(const Clock& clock);
  void report_locked(SimHazard hazard);

  const HazardMode mode_;
  mutable std::mutex mutex_;
  std::vector<StreamState> streams_;  // by id; destroyed streams keep their state
  std::unordered_map<const void*, size_t> stream_ids_;
  std::unordered_map<const void*, Clock> events_;
  Clock completed_;                            // what the host has seen finish
  std::map<const char*, size_t> live_blocks_;  // address -> bytes
  uint64_t operations_ = 0;
  std::vector<SimHazard> hazards_;
};

// What `node` touches when it runs: a copy's source and destination, a
// memset's destination, a kernel's blocks (HazardChecker::kernel_accesses).
std::vector<MemoryAccess> node_accesses(const HazardChecker& checker, const SimNode& node);

}  // namespace grove::runtime::sim
