#include "serving/server_stats.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

namespace grove::serving {

nlohmann::json ServerStats::to_json() const {
  nlohmann::json by_rows = nlohmann::json::object();
  for (const auto& [rows_in_batch, count] : batches_by_rows) {
    by_rows[std::to_string(rows_in_batch)] = count;
  }
  nlohmann::json by_bucket = nlohmann::json::object();
  for (const auto& [bucket, count] : batches_by_bucket) by_bucket[std::to_string(bucket)] = count;
  return nlohmann::json{{"submitted", submitted},
                        {"rejected", rejected},
                        {"invalid", invalid},
                        {"completed", completed},
                        {"failed", failed},
                        {"cancelled", cancelled},
                        {"pending", pending()},
                        {"batches", batches},
                        {"rows", rows},
                        {"padded_rows", padded_rows},
                        {"largest_batch_rows", largest_batch_rows},
                        {"mean_batch_rows", mean_batch_rows()},
                        {"mean_batch_fill", mean_batch_fill()},
                        {"batches_by_rows", by_rows},
                        {"batches_by_bucket", by_bucket},
                        {"request_checks", request_checks},
                        {"door_checks", door_checks},
                        {"request_bytes_to_device", request_bytes_to_device},
                        {"request_copies_to_device", request_copies_to_device},
                        {"worker_launch_ns", worker_launch_ns},
                        {"worker_wait_ns", worker_wait_ns},
                        {"worker_answer_ns", worker_answer_ns},
                        {"launches_after_wait", launches_after_wait}};
}

bool serving_contended_as_before() {
  static const bool locked = [] {
    const char* value = std::getenv("GROVE_SERVING_CONTENDED");
    return value != nullptr && *value != '\0' && std::string_view(value) != "0";
  }();
  return locked;
}

StatsRecorder::StatsRecorder() : locked_submissions_(serving_contended_as_before()) {}

void StatsRecorder::submitted() {
  // Note [Submissions counted without the lock].
  if (locked_submissions_) return bump(&ServerStats::submitted);
  submitted_.fetch_add(1, std::memory_order_relaxed);
}

void StatsRecorder::batch(int64_t rows, int64_t bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.batches;
  stats_.rows += static_cast<uint64_t>(rows);
  stats_.padded_rows += static_cast<uint64_t>(bucket - rows);
  stats_.largest_batch_rows = std::max(stats_.largest_batch_rows, rows);
  ++stats_.batches_by_rows[rows];
  ++stats_.batches_by_bucket[bucket];
}

void StatsRecorder::copied_to_device(uint64_t bytes, uint64_t copies) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.request_bytes_to_device += bytes;
  stats_.request_copies_to_device += copies;
}

void StatsRecorder::worker_time(uint64_t launch_ns, uint64_t wait_ns, uint64_t answer_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.worker_launch_ns += launch_ns;
  stats_.worker_wait_ns += wait_ns;
  stats_.worker_answer_ns += answer_ns;
}

void StatsRecorder::not_queued(bool queue_full) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (locked_submissions_) {
    --stats_.submitted;
  } else {
    submitted_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (queue_full) ++stats_.rejected;
}

ServerStats StatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ServerStats stats = stats_;
  // Note [Submissions counted without the lock]: read after the answers counted.
  if (!locked_submissions_) stats.submitted += submitted_.load(std::memory_order_acquire);
  return stats;
}

void StatsRecorder::bump(uint64_t ServerStats::*field, uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.*field += count;
}

}  // namespace grove::serving
