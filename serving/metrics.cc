#include "serving/metrics.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace grove::serving {
namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void family(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

// A label value as the format wants it: backslash, quote and newline escaped.
std::string label(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped;
}

}  // namespace

void prometheus_family(std::string& out, const std::string& name, const char* type,
                       const std::string& help) {
  family(out, name, type, help);
}

void prometheus_sample(std::string& out, const std::string& name, const std::string& labels,
                       double value) {
  sample(out, name, labels, value);
}

void LatencyHistogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  Shard& shard = shards_[this_thread_shard()];
  shard.counts[i].fetch_add(1, std::memory_order_relaxed);
  shard.sum_ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void LatencyHistogram::write(std::string& out, const std::string& name,
                             const std::string& help) const {
  family(out, name, "histogram", help);
  std::array<uint64_t, kBounds.size() + 1> counts{};
  uint64_t sum_ns = 0;
  for (const Shard& shard : shards_) {
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] += shard.counts[i].load(std::memory_order_relaxed);
    }
    sum_ns += shard.sum_ns.load(std::memory_order_relaxed);
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts[i];
    sample(out, name + "_bucket", "le=\"" + number(kBounds[i]) + "\"",
           static_cast<double>(cumulative));
  }
  cumulative += counts[kBounds.size()];
  sample(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(cumulative));
  sample(out, name + "_sum", "", static_cast<double>(sum_ns) / 1e9);
  sample(out, name + "_count", "", static_cast<double>(cumulative));
}

std::string prometheus_text(const MetricsInput& input) {
  const ServerStats& stats = input.stats;
  std::string out;
  family(out, "grove_requests_total", "counter", "Inference requests by outcome.");
  const std::pair<const char*, uint64_t> outcomes[] = {
      {"completed", stats.completed}, {"failed", stats.failed},   {"cancelled", stats.cancelled},
      {"rejected", stats.rejected},   {"invalid", stats.invalid}, {"submitted", stats.submitted}};
  for (const auto& [outcome, count] : outcomes) {
    sample(out, "grove_requests_total", str_cat("outcome=\"", outcome, "\""),
           static_cast<double>(count));
  }
  family(out, "grove_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, count] : input.http_responses) {
    sample(out, "grove_http_responses_total", str_cat("code=\"", code, "\""),
           static_cast<double>(count));
  }
  family(out, "grove_batches_total", "counter", "Batches run.");
  sample(out, "grove_batches_total", "", static_cast<double>(stats.batches));
  family(out, "grove_rows_total", "counter", "Real rows run in batches.");
  sample(out, "grove_rows_total", "", static_cast<double>(stats.rows));
  family(out, "grove_padded_rows_total", "counter",
         "Zero rows added to fill a batch up to its bucket (padding waste).");
  sample(out, "grove_padded_rows_total", "", static_cast<double>(stats.padded_rows));

  family(out, "grove_batch_rows", "histogram", "Real rows per batch.");
  uint64_t cumulative = 0;
  double row_sum = 0;
  auto by_rows = stats.batches_by_rows.begin();
  for (int64_t bound = 1;; bound *= 2) {
    bound = std::min(bound, std::max<int64_t>(input.max_batch, 1));
    for (; by_rows != stats.batches_by_rows.end() && by_rows->first <= bound; ++by_rows) {
      cumulative += by_rows->second;
      row_sum += static_cast<double>(by_rows->first) * static_cast<double>(by_rows->second);
    }
    sample(out, "grove_batch_rows_bucket", str_cat("le=\"", bound, "\""),
           static_cast<double>(cumulative));
    if (bound >= input.max_batch) break;
  }
  for (; by_rows != stats.batches_by_rows.end(); ++by_rows) {
    cumulative += by_rows->second;
    row_sum += static_cast<double>(by_rows->first) * static_cast<double>(by_rows->second);
  }
  sample(out, "grove_batch_rows_bucket", "le=\"+Inf\"", static_cast<double>(cumulative));
  sample(out, "grove_batch_rows_sum", "", row_sum);
  sample(out, "grove_batch_rows_count", "", static_cast<double>(cumulative));

  family(out, "grove_batches_by_rows_total", "counter",
         "Batches by their exact real rows (what --buckets auto plans from).");
  for (const auto& [rows, count] : stats.batches_by_rows) {
    sample(out, "grove_batches_by_rows_total", str_cat("rows=\"", rows, "\""),
           static_cast<double>(count));
  }
  family(out, "grove_bucket_batches_total", "counter", "Batches run per compiled bucket (hits).");
  for (const auto& [bucket, count] : stats.batches_by_bucket) {
    sample(out, "grove_bucket_batches_total", str_cat("bucket=\"", bucket, "\""),
           static_cast<double>(count));
  }
  family(out, "grove_queue_depth", "gauge", "Requests waiting in the queue.");
  sample(out, "grove_queue_depth", "", static_cast<double>(input.queue_depth));
  family(out, "grove_pending_requests", "gauge", "Accepted requests not yet answered.");
  sample(out, "grove_pending_requests", "", static_cast<double>(stats.pending()));
  if (input.request_latency) {
    input.request_latency->write(out, "grove_request_latency_seconds",
                                 "Inference request latency, body received to answer ready.");
  }
  if (input.queue_wait) {
    input.queue_wait->write(out, "grove_queue_wait_seconds",
                            "Time from submit to the request's batch leaving the queue.");
  }

  // The graph backend's counters and pool, per device (as last refreshed by
  // each worker: ServerConfig::backend_snapshot_period).
  struct TreeCounter {
    const char* key;
    const char* help;
    uint64_t runtime::TreeCounters::*field;
  };
  const TreeCounter tree_counters[] = {
      {"replays", "Graph replays.", &runtime::TreeCounters::replays},
      {"recordings", "Graph recordings.", &runtime::TreeCounters::recordings},
      {"warmups", "Warm-up runs of the graph tree.", &runtime::TreeCounters::warmups},
      {"eager_calls", "Calls the graph tree ran eagerly (fallbacks).",
       &runtime::TreeCounters::eager_calls}};
  for (const TreeCounter& counter : tree_counters) {
    const std::string name = str_cat("grove_graph_", counter.key, "_total");
    family(out, name, "counter", counter.help);
    for (const WorkerSnapshot& snapshot : input.backend_snapshots) {
      if (!snapshot.tree) continue;
      sample(out, name, "device=\"" + label(snapshot.device.str()) + "\"",
             static_cast<double>(snapshot.tree->counters.*counter.field));
    }
  }
  struct PoolGauge {
    const char* key;
    const char* help;
    size_t runtime::PoolStats::*field;
  };
  const PoolGauge pool_gauges[] = {{"reserved_bytes", "Device memory the graph pool holds.",
                                    &runtime::PoolStats::reserved_bytes},
                                   {"allocated_bytes", "Graph pool memory in use by live blocks.",
                                    &runtime::PoolStats::allocated_bytes}};
  for (const PoolGauge& gauge : pool_gauges) {
    const std::string name = str_cat("grove_graph_pool_", gauge.key);
    family(out, name, "gauge", gauge.help);
    for (const WorkerSnapshot& snapshot : input.backend_snapshots) {
      if (!snapshot.memory.device) continue;
      sample(out, name, "device=\"" + label(snapshot.device.str()) + "\"",
             static_cast<double>(snapshot.memory.pool.*gauge.field));
    }
  }
  return out;
}

}  // namespace grove::serving
