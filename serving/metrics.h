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
#include "serving/worker_reports.h"

namespace grove::serving {

// A latency histogram safe to update from any thread (relaxed atomics; a
// scrape may see a count one ahead of the sum).
class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 us to 10 s.
  static constexpr std::array<double, 16> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                     1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   0.5,
                                                     1.0,  2.5,    5.0,  10.0};
  void observe(double seconds);
  // Appends the family `name` (with # HELP `help`) to `out`.
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};  // last: above every bound
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
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
