// Server is grove's batching inference server in reduced-overhead mode:
// submit(request) returns a future at once; one worker per device gathers
// queued requests into batches (up to max_batch rows, or whatever has arrived
// when the oldest request has waited max_wait), pads each batch to the
// smallest shape bucket that holds it, runs the model compiled for that
// bucket with the configured backend ("cudagraphs": one graph replay per
// batch), and completes every request with its own rows.
//
//   Server server(model_file_factory("benchmarks/models/mlp16x512.json"), config);
//   std::future<Response> answer = server.submit({{HostRows::from_values(x, {1, 512})}});
//   std::vector<float> y = answer.get().outputs[0].values<float>();
//   server.shutdown(ShutdownMode::kDrain);
//
// Guarantees: every accepted request's future is set exactly once, with its
// response, with the error that failed its batch, or with
// RequestCancelledError; shutdown() returns only when all are set. A request
// never shares rows with another's response (Note [What a request is]).
// submit() and stats() may be called from any number of threads.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "serving/device_worker.h"
#include "serving/errors.h"
#include "serving/inference_service.h"
#include "serving/model_signature.h"
#include "serving/request.h"
#include "serving/request_queue.h"
#include "serving/server_config.h"
#include "serving/server_stats.h"

namespace grove::serving {

class Server : public InferenceService {
 public:
  // Validates the config (ConfigError naming the field), builds the model for
  // every bucket and device (ConfigError when a program is not batched along
  // dim 0, or buckets disagree beyond the batch), and starts the workers,
  // returning once every bucket is compiled and warmed up on every device
  // (rethrowing the first worker's error).
  Server(const ProgramFactory& model, ServerConfig config);
  // shutdown(ShutdownMode::kDrain) unless it already happened.
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Queues `request` (Note [What a request is]) and returns its future.
  // Throws, queueing nothing: ShapeError / DTypeError naming the input for a
  // request that does not fit the model, QueueFullError when queue_capacity
  // requests are waiting (back-pressure), ServerClosedError after shutdown().
  std::future<Response> submit(Request request) override;
  std::future<Response> submit_then(Request request, std::function<void()> on_ready) override;
  std::future<Response> submit_then(CheckedRequest request,
                                    std::function<void()> on_ready) override;
  void submit_then_answer(CheckedRequest request, OnAnswer on_answer) override;

  // Stops taking requests and waits for the workers. kDrain runs every queued
  // request (batches are not held back for max_wait); kCancel sets every
  // queued request's future to RequestCancelledError (batches already running
  // complete). Idempotent; later calls return at once.
  void shutdown(ShutdownMode mode = ShutdownMode::kDrain);

  // A request is counted (completed, failed, cancelled) before its future
  // becomes ready, so a caller holding an answer sees it counted.
  ServerStats stats() const override;
  size_t queue_size() const override { return queue_.size(); }
  const ServerConfig& config() const { return config_; }
  const ModelSignature& signature() const override { return signature_; }
  int64_t max_batch() const override { return config_.max_batch; }
  // One DeviceWorker::report() per device; the trees at exit are filled in
  // after shutdown().
  std::vector<WorkerReport> worker_reports() const;
  // One DeviceWorker::backend_snapshot() per device.
  std::vector<WorkerSnapshot> backend_snapshots() const override;

 private:
  // A checked request as the queue holds it, and its push, counted.
  PendingRequest pending_for(CheckedRequest request);
  void enqueue(PendingRequest pending);

  ServerConfig config_;
  ModelSignature signature_;
  RequestQueue queue_;
  StatsRecorder stats_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::atomic<uint64_t> next_id_{0};
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
};

}  // namespace grove::serving
