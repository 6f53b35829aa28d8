// ShardedCounter is a count that many threads add to at a high rate: each
// thread adds to a cache-line slot of its own (Note [Counters per thread]),
// and a reader sums the slots.
//
// Note [Counters per thread]
// The HTTP front's loops each counted every request on a few counters shared
// by all of them (responses written, socket reads, request checks, the
// latency histograms): at ~500,000 requests/s over 24 loops, each add took
// the counter's cache line from the core that added last. So such a counter
// is kCounterShards cache-line-aligned slots, a thread adding to the slot
// this_thread_shard() gave it (threads take slots in turn), and load() sums
// them: a count read while threads add may miss adds in flight, as a relaxed
// atomic's would, and is exact once they are done. GROVE_SERVING_CONTENDED=1
// puts every thread on slot 0, one shared atomic as before (the A/B of
// session 23). Tests: ShardedCounter.SumsEveryThreadsAdds,
// Metrics.HistogramSumsEveryThreadsObservations,
// KserveRoutes.ResponsesCountedFromManyThreadsByStatus.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace grove::serving {

inline constexpr size_t kCounterShards = 16;

// This thread's slot in [0, kCounterShards), taken in turn at its first call
// (0 for every thread under GROVE_SERVING_CONTENDED=1).
size_t this_thread_shard();

class ShardedCounter {
 public:
  void add(uint64_t count = 1) {
    slots_[this_thread_shard()].value.fetch_add(count, std::memory_order_relaxed);
  }
  uint64_t load() const {
    uint64_t total = 0;
    for (const Slot& slot : slots_) total += slot.value.load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};
  };
  std::array<Slot, kCounterShards> slots_{};
};

}  // namespace grove::serving
