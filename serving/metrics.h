// What GET /metrics answers: the server's counters in the Prometheus text
// exposition format (version 0.0.4), written by hand: a few families of
// counters, gauges and histograms, each with its # HELP and # TYPE lines.
//
// Families: grove_requests_total{outcome}, grove_http_responses_total{code},
// grove_batches_total, grove_batch_rows (histogram of real rows per batch),
// grove_batches_by_rows_total{rows} (exact sizes, what bucket planning reads),
// grove_bucket_batches_total{bucket} (hits per compiled bucket),
// grove_rows_total and grove_padded_rows_total (padding waste),
// grove_queue_depth, grove_pending_requests, grove_request_latency_seconds
// and grove_queue_wait_seconds (histograms), and per device
// grove_graph_{replays,recordings,warmups,eager_calls}_total,
// grove_graph_pool_reserved_bytes and grove_graph_pool_allocated_bytes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/server_stats.h"
#include "serving/sharded_counter.h"
#include "serving/worker_reports.h"

namespace grove::serving {

// A latency histogram safe to update from any thread (relaxed atomics; a
// scrape may see a count one ahead of the sum).
//
// Note [Histograms counted per thread]
// Every HTTP loop observes two histograms per request, three atomic adds
// each on cache lines that 24 loops took from each other at ~500,000
// requests/s. So the counts (a bucket and the sum; the count is the buckets'
// total) live in kShards cache-line-aligned shards, a thread adding to its
// own (this_thread_shard(), Note [Counters per thread]), and write() sums
// them. Test: Metrics.HistogramSumsEveryThreadsObservations
// (tests/serving/kserve_routes_test.cc).
class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 us to 10 s.
  static constexpr std::array<double, 16> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                     1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   0.5,
                                                     1.0,  2.5,    5.0,  10.0};
  static constexpr size_t kShards = kCounterShards;
  void observe(double seconds);
  // Appends the family `name` (with # HELP `help`) to `out`.
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts{};  // last: above every bound
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<Shard, kShards> shards_{};
};

struct MetricsInput {
  ServerStats stats;
  size_t queue_depth = 0;
  int64_t max_batch = 0;
  std::map<int, uint64_t> http_responses;  // status code -> responses
  const LatencyHistogram* request_latency = nullptr;
  const LatencyHistogram* queue_wait = nullptr;
  std::vector<WorkerSnapshot> backend_snapshots;  // Server::backend_snapshots()
};

std::string prometheus_text(const MetricsInput& input);

// For other families (serving/llm/llm_metrics.cc): a family's # HELP and
// # TYPE lines, and one sample ("" labels: none).
void prometheus_family(std::string& out, const std::string& name, const char* type,
                       const std::string& help);
void prometheus_sample(std::string& out, const std::string& name, const std::string& labels,
                       double value);

}  // namespace grove::serving
