#include "runtime/sim/hazard_checker.h"

#include <algorithm>

namespace grove::runtime::sim {

// Note [Stream hazards]: the checker keeps a vector clock per stream (for
// every stream, the last of its operations known to come first) and the
// operations each stream has not been seen to finish, with the byte ranges
// they touch. An event carries the clock of its stream when recorded; a wait
// joins it into the waiting stream's clock; a host synchronization (a stream,
// an event, the device, a copy into pageable host memory) joins it into
// `completed_`, which every later operation of every stream inherits, and
// prunes what it covers. A new operation conflicts with a pending one of
// another stream that its stream's clock does not cover when their ranges
// overlap and either writes; a block the allocator hands out conflicts with
// every uncovered pending use. Copies and memsets know their ranges; a
// kernel's pointer arguments are mapped to the allocator's live blocks. Tests:
// tests/runtime/sim_hazard_test.cc (a missing event is reported naming both
// operations, the same with the event is clean, a block reused early).

namespace {

constexpr size_t kMaxPendingPerStream = size_t{1} << 14;

void join(std::vector<uint64_t>& into, const std::vector<uint64_t>& other) {
  if (into.size() < other.size()) into.resize(other.size(), 0);
  for (size_t i = 0; i < other.size(); ++i) into[i] = std::max(into[i], other[i]);
}

uint64_t at(const std::vector<uint64_t>& clock, size_t id) {
  return id < clock.size() ? clock[id] : 0;
}

// Whether some range of `earlier` and some range of `later` overlap with at
// least one of the two writing; the first such pair.
bool overlapping(const std::vector<MemoryAccess>& earlier, const std::vector<MemoryAccess>& later,
                 MemoryAccess* earlier_range, MemoryAccess* later_range) {
  for (const MemoryAccess& a : earlier) {
    for (const MemoryAccess& b : later) {
      if ((a.writes || b.writes) && a.begin < b.end && b.begin < a.end) {
        *earlier_range = a;
        *later_range = b;
        return true;
      }
    }
  }
  return false;
}

std::string range(const MemoryAccess& access) {
  return str_cat("[", static_cast<const void*>(access.begin), ", +",
                 static_cast<size_t>(access.end - access.begin), ")");
}

}  // namespace

HazardChecker::StreamState& HazardChecker::stream_locked(const void* stream) {
  auto it = stream_ids_.find(stream);
  if (it != stream_ids_.end()) return streams_[it->second];
  size_t id = streams_.size();
  stream_ids_.emplace(stream, id);
  streams_.push_back(StreamState{});
  StreamState& state = streams_.back();
  state.id = id;
  state.name = str_cat("stream ", id);
  state.clock = completed_;
  return state;
}

void HazardChecker::stream_created(const void* stream, bool legacy_default) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_ids_.erase(stream);  // a new stream may reuse a destroyed one's address
  StreamState& state = stream_locked(stream);
  if (legacy_default) state.name = "the legacy default stream";
}

void HazardChecker::stream_destroyed(const void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_ids_.erase(stream);
}

void HazardChecker::event_destroyed(const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.erase(event);
}

void HazardChecker::absorb_completed_locked(StreamState& stream) { join(stream.clock, completed_); }

const HazardChecker::Pending* HazardChecker::find_unordered_locked(
    const StreamState& stream, const std::vector<MemoryAccess>& accesses, const StreamState** owner,
    Overlap* overlap) const {
  for (const StreamState& other : streams_) {
    if (other.id == stream.id) continue;
    uint64_t ordered_up_to = at(stream.clock, other.id);
    for (auto it = other.pending.rbegin(); it != other.pending.rend(); ++it) {
      if (it->epoch <= ordered_up_to) break;
      if (overlapping(it->accesses, accesses, &overlap->earlier, &overlap->later)) {
        *owner = &other;
        return &*it;
      }
    }
  }
  return nullptr;
}

void HazardChecker::operation(const void* stream, const std::string& name,
                              const std::vector<MemoryAccess>& accesses) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& state = stream_locked(stream);
  absorb_completed_locked(state);
  std::string full = str_cat("#", ++operations_, " ", name, " on ", state.name);
  const StreamState* owner = nullptr;
  Overlap overlap;
  if (const Pending* earlier = find_unordered_locked(state, accesses, &owner, &overlap)) {
    report_locked(SimHazard{
        SimHazard::Kind::kUnorderedAccess, earlier->name, full,
        str_cat("stream hazard: '", full, "' ", overlap.later.writes ? "writes" : "reads", " ",
                range(overlap.later), ", which '", earlier->name, "' ",
                overlap.earlier.writes ? "writes" : "reads", " at ", range(overlap.earlier),
                ", and nothing orders the two: ", state.name, " does not wait for ", owner->name,
                ". Record an event on ", owner->name, " after it and make ", state.name,
                " wait on it (stream_wait_event), or synchronize before")});
  }
  if (state.clock.size() <= state.id) state.clock.resize(state.id + 1, 0);
  uint64_t epoch = ++state.clock[state.id];
  if (accesses.empty()) return;
  state.pending.push_back(Pending{epoch, std::move(full), accesses});
  if (state.pending.size() > kMaxPendingPerStream) state.pending.pop_front();
}

std::vector<MemoryAccess> HazardChecker::kernel_accesses(const KernelArgs& args) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<MemoryAccess> accesses;
  for (uint64_t slot : args.slots) {
    const char* pointer = reinterpret_cast<const char*>(slot);
    auto it = live_blocks_.upper_bound(pointer);
    if (it == live_blocks_.begin()) continue;
    --it;
    if (pointer >= it->first + it->second) continue;
    MemoryAccess access{it->first, it->first + it->second, true};
    bool seen = std::any_of(accesses.begin(), accesses.end(),
                            [&](const MemoryAccess& a) { return a.begin == access.begin; });
    if (!seen) accesses.push_back(access);
  }
  return accesses;
}

void HazardChecker::event_recorded(const void* event, const void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& state = stream_locked(stream);
  absorb_completed_locked(state);
  events_[event] = state.clock;
}

void HazardChecker::stream_waited(const void* stream, const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) return;  // never recorded: the wait orders nothing
  join(stream_locked(stream).clock, it->second);
}

void HazardChecker::complete_locked(const Clock& clock) {
  join(completed_, clock);
  for (StreamState& state : streams_) {
    uint64_t done = at(completed_, state.id);
    while (!state.pending.empty() && state.pending.front().epoch <= done) {
      state.pending.pop_front();
    }
  }
}

void HazardChecker::stream_synchronized(const void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Clock clock = stream_locked(stream).clock;
  complete_locked(clock);
}

void HazardChecker::event_synchronized(const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it != events_.end()) complete_locked(Clock(it->second));
}

void HazardChecker::device_synchronized() {
  std::lock_guard<std::mutex> lock(mutex_);
  Clock all;
  for (const StreamState& state : streams_) join(all, state.clock);
  complete_locked(all);
}

void HazardChecker::block_allocated(const void* address, size_t bytes, const void* stream,
                                    bool handed_out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* begin = static_cast<const char*>(address);
  live_blocks_[begin] = bytes;
  if (!handed_out) return;
  StreamState& state = stream_locked(stream);
  absorb_completed_locked(state);
  const StreamState* owner = nullptr;
  Overlap overlap;
  std::vector<MemoryAccess> block{MemoryAccess{begin, begin + bytes, true}};
  if (const Pending* earlier = find_unordered_locked(state, block, &owner, &overlap)) {
    std::string later = str_cat("allocation of block ", range(block[0]), " on ", state.name);
    report_locked(SimHazard{
        SimHazard::Kind::kBlockReusedEarly, earlier->name, later,
        str_cat("stream hazard: pool block ", range(block[0]), " handed out again on ", state.name,
                " while '", earlier->name, "', which ", overlap.earlier.writes ? "writes" : "reads",
                " it, may still be pending: nothing "
                "orders it before ",
                state.name,
                ". The block was freed too early: keep its tensor alive until that "
                "work is done, make ",
                state.name, " wait on an event recorded after it, or synchronize ", owner->name,
                " before freeing")});
  }
}

void HazardChecker::block_freed(const void* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_blocks_.erase(static_cast<const char*>(address));
}

void HazardChecker::report_locked(SimHazard hazard) {
  if (mode_ == HazardMode::kThrow) throw StreamHazardError(hazard.message);
  hazards_.push_back(std::move(hazard));
}

std::vector<SimHazard> HazardChecker::hazards() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hazards_;
}

void HazardChecker::clear_hazards() {
  std::lock_guard<std::mutex> lock(mutex_);
  hazards_.clear();
}

std::vector<MemoryAccess> node_accesses(const HazardChecker& checker, const SimNode& node) {
  auto bytes_at = [&](const void* pointer, bool writes) {
    const char* begin = static_cast<const char*>(pointer);
    return MemoryAccess{begin, begin + node.bytes, writes};
  };
  switch (node.kind) {
    case SimNode::Kind::kKernel:
      return checker.kernel_accesses(node.args);
    case SimNode::Kind::kCopy:
      if (node.bytes == 0) return {};
      return {bytes_at(node.source, false), bytes_at(node.destination, true)};
    case SimNode::Kind::kMemset:
      if (node.bytes == 0) return {};
      return {bytes_at(node.destination, true)};
    case SimNode::Kind::kHostFunction:
      return {};  // what a host function touches is not known
    case SimNode::Kind::kWhile: {
      std::vector<MemoryAccess> accesses;
      for (const SimNode& body_node : node.loop->body) {
        std::vector<MemoryAccess> more = node_accesses(checker, body_node);
        accesses.insert(accesses.end(), more.begin(), more.end());
      }
      return accesses;
    }
  }
  return {};
}

}  // namespace grove::runtime::sim
