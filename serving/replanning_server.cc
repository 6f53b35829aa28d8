#include "serving/replanning_server.h"

#include <algorithm>

#include "runtime/logging.h"
#include "serving/bucket_plan.h"

namespace grove::serving {
namespace {

void add_stats(ServerStats& total, const ServerStats& part) {
  total.submitted += part.submitted;
  total.rejected += part.rejected;
  total.invalid += part.invalid;
  total.completed += part.completed;
  total.failed += part.failed;
  total.cancelled += part.cancelled;
  total.batches += part.batches;
  total.rows += part.rows;
  total.padded_rows += part.padded_rows;
  total.request_checks += part.request_checks;
  total.door_checks += part.door_checks;
  total.request_bytes_to_device += part.request_bytes_to_device;
  total.request_copies_to_device += part.request_copies_to_device;
  total.worker_launch_ns += part.worker_launch_ns;
  total.worker_wait_ns += part.worker_wait_ns;
  total.worker_answer_ns += part.worker_answer_ns;
  total.launches_after_wait += part.launches_after_wait;
  total.largest_batch_rows = std::max(total.largest_batch_rows, part.largest_batch_rows);
  for (const auto& [rows, count] : part.batches_by_rows) total.batches_by_rows[rows] += count;
  for (const auto& [bucket, count] : part.batches_by_bucket) {
    total.batches_by_bucket[bucket] += count;
  }
}

// The graph counters /metrics reports (serving/metrics.h), `from` added to `into`.
void add_tree_counters(runtime::TreeCounters& into, const runtime::TreeCounters& from) {
  into.replays += from.replays;
  into.recordings += from.recordings;
  into.warmups += from.warmups;
  into.eager_calls += from.eager_calls;
}

std::string list_text(const std::vector<int64_t>& sizes) {
  std::string text;
  for (int64_t size : sizes) text += (text.empty() ? "" : ",") + std::to_string(size);
  return text;
}

}  // namespace

ReplanningServer::ReplanningServer(ProgramFactory model, ServerConfig config, ReplanConfig replan)
    : model_(std::move(model)), config_(std::move(config)), replan_(std::move(replan)) {
  GROVE_CHECK_AS(ConfigError, replan_.min_gain > 0 && replan_.min_gain <= 1,
                 "ReplanConfig::min_gain ", replan_.min_gain, " is outside (0, 1]");
  server_ = std::make_shared<Server>(model_, config_);
  signature_ = server_->signature();
  if (replan_.period.count() > 0) planner_ = std::thread([this] { planner_main(); });
}

ReplanningServer::~ReplanningServer() {
  try {
    shutdown(ShutdownMode::kDrain);
  } catch (const std::exception& error) {
    log(LogLevel::kWarn, str_cat("ReplanningServer: shutdown failed: ", error.what()));
  }
}

std::shared_ptr<Server> ReplanningServer::current() const {
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  return server_;
}

std::future<Response> ReplanningServer::submit(Request request) {
  return submit_then(std::move(request), nullptr);
}

std::future<Response> ReplanningServer::submit_then(CheckedRequest request,
                                                    std::function<void()> on_ready) {
  // Note [Switching servers]; every Server of this service has one signature.
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  return server_->submit_then(std::move(request), std::move(on_ready));
}

void ReplanningServer::submit_then_answer(CheckedRequest request, OnAnswer on_answer) {
  // Note [Switching servers]: queued while the lock is held.
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  server_->submit_then_answer(std::move(request), std::move(on_answer));
}

std::future<Response> ReplanningServer::submit_then(Request request,
                                                    std::function<void()> on_ready) {
  // Note [Switching servers]: queued while the lock is held.
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  return server_->submit_then(std::move(request), std::move(on_ready));
}

ServerStats ReplanningServer::stats() const {
  // Both under one lock, so a switch between the two reads cannot count the
  // retired Server twice or not at all.
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  ServerStats total;
  {
    std::lock_guard<std::mutex> state(state_mutex_);
    total = retired_;
  }
  add_stats(total, server_->stats());
  total.request_checks += signature_.request_checks();  // the fronts' checks
  return total;
}

size_t ReplanningServer::queue_size() const { return current()->queue_size(); }

std::vector<WorkerSnapshot> ReplanningServer::backend_snapshots() const {
  std::shared_lock<std::shared_mutex> lock(switch_mutex_);
  std::vector<WorkerSnapshot> snapshots = server_->backend_snapshots();
  std::lock_guard<std::mutex> state(state_mutex_);
  for (WorkerSnapshot& snapshot : snapshots) {
    auto retired = retired_tree_.find(snapshot.device.str());
    if (retired != retired_tree_.end() && snapshot.tree) {
      add_tree_counters(snapshot.tree->counters, retired->second);
    }
  }
  return snapshots;
}

std::vector<WorkerReport> ReplanningServer::worker_reports() const {
  return current()->worker_reports();
}

std::vector<int64_t> ReplanningServer::buckets() const { return current()->config().buckets; }

uint64_t ReplanningServer::switches() const {
  std::lock_guard<std::mutex> state(state_mutex_);
  return switches_;
}

bool ReplanningServer::replan_now() {
  std::lock_guard<std::mutex> one_at_a_time(replan_mutex_);
  std::shared_ptr<Server> old = current();
  // The batches since the last plan (this Server's counters only grow).
  std::map<int64_t, uint64_t> recent;
  uint64_t batches = 0;
  const std::map<int64_t, uint64_t> now = old->stats().batches_by_rows;
  {
    std::lock_guard<std::mutex> state(state_mutex_);
    if (stopping_) return false;
    for (const auto& [rows, count] : now) {
      auto before = planned_at_.find(rows);
      const uint64_t fresh = count - (before == planned_at_.end() ? 0 : before->second);
      if (fresh > 0) recent[rows] = fresh;
      batches += fresh;
    }
  }
  if (batches < replan_.min_batches) return false;
  {
    std::lock_guard<std::mutex> state(state_mutex_);
    planned_at_ = now;
  }
  const std::vector<int64_t> buckets = old->config().buckets;  // a copy: `old` goes below
  std::vector<int64_t> planned = plan_buckets(recent, config_.max_batch, buckets.size());
  const uint64_t padding_now = padded_rows(buckets, recent);
  const uint64_t padding_planned = padded_rows(planned, recent);
  if (planned == buckets || padding_planned >= padding_now ||
      static_cast<double>(padding_planned) > replan_.min_gain * static_cast<double>(padding_now)) {
    return false;  // a switch costs a compile and, briefly, twice the memory
  }
  if (replan_.memory_budget_bytes > 0) {
    int64_t pool = 0;
    for (const WorkerSnapshot& snapshot : old->backend_snapshots()) {
      pool += static_cast<int64_t>(snapshot.memory.pool.reserved_bytes);
    }
    if (2 * pool > replan_.memory_budget_bytes) {
      if (replan_.on_switch) {
        replan_.on_switch(str_cat(
            "buckets not re-planned: during a switch both servers would "
            "hold ",
            2 * pool, " bytes of graph pool, over the budget of ", replan_.memory_budget_bytes));
      }
      return false;
    }
  }
  // Built before the switch, while the old Server keeps answering.
  ServerConfig next = config_;
  next.buckets = planned;
  auto replacement = std::make_shared<Server>(model_, next);
  replacement->signature().check_matches(signature_, "the re-planned server's model");
  {
    std::unique_lock<std::shared_mutex> lock(switch_mutex_);
    server_ = replacement;
  }
  old->shutdown(ShutdownMode::kDrain);
  const std::vector<WorkerReport> reports = old->worker_reports();  // tree_at_exit is set now
  {
    std::lock_guard<std::mutex> state(state_mutex_);
    add_stats(retired_, old->stats());
    for (const WorkerReport& report : reports) {
      if (report.tree_at_exit) {
        add_tree_counters(retired_tree_[report.device.str()], report.tree_at_exit->counters);
      }
    }
    planned_at_.clear();  // the new Server counts from zero
    ++switches_;
  }
  old.reset();  // its models, recordings and pool go with it
  if (replan_.on_switch) {
    replan_.on_switch(str_cat("buckets re-planned from ", batches, " batches: ", list_text(buckets),
                              " -> ", list_text(planned), " (padded rows ", padding_now, " -> ",
                              padding_planned, " on those batches)"));
  }
  return true;
}

void ReplanningServer::planner_main() {
  while (true) {
    {
      std::unique_lock<std::mutex> state(state_mutex_);
      wake_.wait_for(state, replan_.period, [this] { return stopping_; });
      if (stopping_) return;
    }
    try {
      replan_now();
    } catch (const std::exception& error) {
      // The current Server keeps serving; the next period tries again.
      log(LogLevel::kWarn, str_cat("ReplanningServer: re-planning failed: ", error.what()));
    }
  }
}

void ReplanningServer::shutdown(ShutdownMode mode) {
  {
    std::lock_guard<std::mutex> state(state_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (planner_.joinable()) planner_.join();
  std::lock_guard<std::mutex> one_at_a_time(replan_mutex_);
  current()->shutdown(mode);
}

}  // namespace grove::serving
