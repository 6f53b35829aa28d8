#include "serving/server.h"

#include <optional>

#include "runtime/logging.h"

namespace grove::serving {
namespace {

ServerConfig validated(ServerConfig config) {
  config.validate();
  config.devices = config.resolved_devices();
  return config;
}

// The signature of the smallest bucket's program, checked against the others.
ModelSignature signature_of(const std::vector<std::vector<compiler::ir::Program>>& programs,
                            const ServerConfig& config) {
  ModelSignature first = ModelSignature::of(programs[0][0], config.buckets[0]);
  for (size_t d = 0; d < programs.size(); ++d) {
    for (size_t b = 0; b < programs[d].size(); ++b) {
      first.check_matches(ModelSignature::of(programs[d][b], config.buckets[b]),
                          str_cat("served model built for batch ", config.buckets[b], " on ",
                                  config.devices[d].str()));
    }
  }
  return first;
}

std::vector<std::vector<compiler::ir::Program>> build_programs(const ProgramFactory& model,
                                                               const ServerConfig& config) {
  GROVE_CHECK_AS(ConfigError, static_cast<bool>(model),
                 "Server: the model factory is empty; pass model_file_factory(path) or a "
                 "function building the Program for a batch size");
  std::vector<std::vector<compiler::ir::Program>> programs(config.devices.size());
  for (size_t d = 0; d < config.devices.size(); ++d) {
    for (int64_t bucket : config.buckets) programs[d].push_back(model(bucket, config.devices[d]));
  }
  return programs;
}

}  // namespace

Server::Server(const ProgramFactory& model, ServerConfig config)
    : config_(validated(std::move(config))),
      queue_(config_.queue_capacity, config_.max_batch, config_.max_wait) {
  std::vector<std::vector<compiler::ir::Program>> programs = build_programs(model, config_);
  signature_ = signature_of(programs, config_);
  for (size_t d = 0; d < config_.devices.size(); ++d) {
    workers_.push_back(std::make_unique<DeviceWorker>(config_.devices[d], std::move(programs[d]),
                                                      config_, signature_, queue_, stats_));
  }
  try {
    for (auto& worker : workers_) worker->start();
  } catch (...) {
    queue_.close();
    for (auto& worker : workers_) worker->join();
    throw;
  }
}

Server::~Server() {
  try {
    shutdown(ShutdownMode::kDrain);
  } catch (const std::exception& error) {
    log(LogLevel::kWarn, str_cat("Server: shutdown in the destructor failed: ", error.what()));
  }
}

std::future<Response> Server::submit(Request request) {
  return submit_then(std::move(request), nullptr);
}

std::future<Response> Server::submit_then(Request request, std::function<void()> on_ready) {
  std::optional<CheckedRequest> checked;
  try {
    checked = signature_.check_request(std::move(request), config_.max_batch);
  } catch (const Error&) {
    stats_.invalid();
    throw;
  }
  return submit_then(std::move(*checked), std::move(on_ready));
}

std::future<Response> Server::submit_then(CheckedRequest request, std::function<void()> on_ready) {
  PendingRequest pending = pending_for(std::move(request));
  pending.on_ready = std::move(on_ready);
  if (!pending.promise) pending.promise.emplace();  // Note [No promise without a future]
  std::future<Response> future = pending.promise->get_future();
  enqueue(std::move(pending));
  return future;
}

void Server::submit_then_answer(CheckedRequest request, OnAnswer on_answer) {
  // Note [Answers without a future].
  PendingRequest pending = pending_for(std::move(request));
  pending.on_answer = std::move(on_answer);
  enqueue(std::move(pending));
}

PendingRequest Server::pending_for(CheckedRequest request) {
  // Note [Requests checked once]: only a check gives a request rows.
  GROVE_CHECK(request.rows() >= 1,
              "Server: a CheckedRequest without rows was submitted; "
              "build one with ModelSignature::check_request");
  PendingRequest pending;
  // Note [No promise without a future]: GROVE_SERVING_CONTENDED=1 makes one for every request.
  if (serving_contended_as_before()) pending.promise.emplace();
  pending.rows = request.rows();
  pending.request = std::move(request).release();
  pending.id = next_id_++;
  return pending;
}

void Server::enqueue(PendingRequest pending) {
  // Counted before the push: a worker may answer the request before push() returns.
  stats_.submitted();
  try {
    queue_.push(std::move(pending));
  } catch (const QueueFullError&) {
    stats_.not_queued(/*queue_full=*/true);
    throw;
  } catch (...) {
    stats_.not_queued(/*queue_full=*/false);
    throw;
  }
}

ServerStats Server::stats() const {
  ServerStats stats = stats_.snapshot();
  stats.request_checks = signature_.request_checks();
  return stats;
}

void Server::shutdown(ShutdownMode mode) {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (mode == ShutdownMode::kCancel) {
    std::vector<PendingRequest> cancelled = queue_.close_and_take_all();
    stats_.cancelled(cancelled.size());
    for (PendingRequest& request : cancelled) {
      fail_request(request, std::make_exception_ptr(RequestCancelledError(
                                str_cat("request ", request.id, " (", request.rows,
                                        " rows) was cancelled: the server shut down "
                                        "(ShutdownMode::kCancel) before it ran"))));
    }
  } else {
    queue_.close();
  }
  for (auto& worker : workers_) worker->join();
}

std::vector<WorkerReport> Server::worker_reports() const {
  std::vector<WorkerReport> reports;
  for (const auto& worker : workers_) reports.push_back(worker->report());
  return reports;
}

std::vector<WorkerSnapshot> Server::backend_snapshots() const {
  std::vector<WorkerSnapshot> snapshots;
  for (const auto& worker : workers_) snapshots.push_back(worker->backend_snapshot());
  return snapshots;
}

}  // namespace grove::serving
