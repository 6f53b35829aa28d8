#include "serving/sharded_counter.h"

#include "serving/server_stats.h"

namespace grove::serving {

size_t this_thread_shard() {
  // Note [Counters per thread].
  static std::atomic<size_t> next{0};
  thread_local const size_t shard =
      serving_contended_as_before() ? 0
                                    : next.fetch_add(1, std::memory_order_relaxed) % kCounterShards;
  return shard;
}

}  // namespace grove::serving
