// DeviceWorker is the server's worker for one device: on a thread of its own
// it compiles the model once per bucket, warms every bucket up, then takes
// batches from the shared queue, pads each to its bucket, runs it, and
// answers every request of the batch with its own rows.
//
// Note [One compiled model per bucket]
// A grove Program has static shapes, so the server compiles one CompiledModel
// per bucket (the factory builds the Program with batch = bucket) through
// compile(), with the configured backend. It does not use
// cudagraph_trees::BucketedFunction: that helper wraps a single tree-manager
// function, while a compiled model is a lowered program whose segments the
// "cudagraphs" backend captures piecewise (eager segments in between), and
// the same path must serve "eager" for comparison. Padding and slicing follow
// Note [Shape buckets] (shape_buckets.h): rows are independent, padded rows
// are zeros and never reach a response. Costs: each bucket keeps its own copy
// of the params (the initializers are seeded, so every copy is identical;
// 16 MiB per bucket for mlp16x512 in f32) and its own recording in the
// worker thread's tree manager. Buckets are warmed up largest first, so, as
// with BucketedFunction, the smaller recordings reuse the pool segments of the
// largest one. Everything graph-related happens on the worker thread: tree
// managers are per (device, thread).
#pragma once

#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "compiler/backends/compile.h"
#include "serving/model_signature.h"
#include "serving/request_queue.h"
#include "serving/server_config.h"
#include "serving/server_stats.h"

namespace grove::serving {

class DeviceWorker {
 public:
  // `bucket_programs[i]` is the model built for config.buckets[i] on `device`.
  DeviceWorker(runtime::Device device, std::vector<compiler::ir::Program> bucket_programs,
               const ServerConfig& config, const ModelSignature& signature, RequestQueue& queue,
               StatsRecorder& stats);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  // Starts the thread and waits until every bucket is compiled and warmed up.
  // Rethrows the thread's error (compile or warm-up), after which the thread
  // has ended.
  void start();
  // Waits for the thread, which ends when the queue is closed and empty.
  void join();

  runtime::Device device() const { return device_; }
  // {"device", "backend", "warmup_ms", "tree_after_warmup", "tree_at_exit"}:
  // the worker thread's tree-manager counters ("cudagraphs" only), the second
  // once the thread has ended.
  nlohmann::json report() const;

 private:
  struct Bucket {
    int64_t rows = 0;
    std::optional<compiler::backends::CompiledModel> model;
    compiler::TensorList inputs;  // device tensors [rows, ...], one per model input
  };

  void thread_main(std::promise<void>& ready);
  void prepare();
  void serve();
  // Runs one batch and answers its requests; never throws.
  void run_batch(std::vector<PendingRequest>& batch);
  // Pads and copies the batch's input rows into `bucket`, runs its model, and
  // returns each output's first `rows` rows in host memory.
  std::vector<std::vector<uint8_t>> execute(Bucket& bucket, std::vector<PendingRequest>& batch,
                                            int64_t rows);
  nlohmann::json tree_counters() const;

  const runtime::Device device_;
  std::vector<compiler::ir::Program> programs_;
  const ServerConfig& config_;
  const ModelSignature& signature_;
  RequestQueue& queue_;
  StatsRecorder& stats_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<uint8_t>> staging_;  // per input: the largest bucket's rows
  std::thread thread_;
  double warmup_ms_ = 0;
  nlohmann::json tree_after_warmup_;
  nlohmann::json tree_at_exit_;
};

}  // namespace grove::serving
