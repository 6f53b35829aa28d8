// How a batching server is set up: the model (a factory that builds its
// Program for a given batch size), how batches are formed (max_batch,
// max_wait, buckets), how much may wait (queue_capacity), how batches run
// (backend) and where (one worker per device).
//
//   ServerConfig config;
//   config.max_batch = 64;
//   config.max_wait = std::chrono::microseconds(500);
//   config.devices = {runtime::Device::parse("cuda:0")};
//   Server server(model_file_factory("benchmarks/models/mlp16x512.json"), config);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "compiler/ir/program.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device.h"

namespace grove::serving {

// Builds the model's Program for `batch` rows on `device`. Every `input` and
// output of the program has the batch as dim 0 and is row-independent
// (Note [Shape buckets] in cudagraph_trees/shape_buckets.h). Called on the
// thread that constructs the Server, once per (bucket, device).
using ProgramFactory = std::function<compiler::ir::Program(int64_t batch, runtime::Device device)>;

// A factory that loads a grove model JSON file with `batch_dim` bound to the
// batch and `other_dims` bound as given ({"seq": 32} for gpt4x256).
ProgramFactory model_file_factory(std::string path, std::string batch_dim = "batch",
                                  compiler::model_format::DimBindings other_dims = {});

enum class ShutdownMode : uint8_t {
  kDrain,   // run every queued request, then stop
  kCancel,  // fail every queued request with RequestCancelledError, then stop
};

struct ServerConfig {
  // Most rows in one batch; at most the largest bucket. A request may carry up
  // to max_batch rows.
  int64_t max_batch = 64;
  // How long the oldest queued request may wait for its batch to fill before
  // the batch runs as it is. Zero: run whatever is queued at once.
  std::chrono::microseconds max_wait{500};
  // Requests that may wait in the queue (not counting running batches);
  // submit() beyond it throws QueueFullError.
  size_t queue_capacity = 1024;
  // Batch sizes the model is compiled for, strictly increasing; a batch of n
  // rows runs in the smallest bucket >= n, padded with zero rows.
  std::vector<int64_t> buckets = {1, 2, 4, 8, 16, 32, 64};
  // Execution backend by name: "cudagraphs" (the point of this server) or "eager".
  std::string backend = "cudagraphs";
  // One worker per device; every worker takes batches from the one queue.
  // Empty: runtime::default_device().
  std::vector<runtime::Device> devices;
  // Calls per bucket at startup, largest bucket first, so that the graph
  // backend has warmed up, recorded and replayed every bucket before the
  // first request (at least 3 for "cudagraphs"; 0 allowed for "eager").
  int64_t warmup_calls = 3;
  // Called on the worker thread before each batch runs, with the batch's real
  // rows and the worker's device: tracing, and tests that hold a worker to
  // queue requests deterministically. An exception it throws fails that
  // batch's requests with that error.
  std::function<void(int64_t rows, runtime::Device device)> before_batch;
  // Called on the worker thread with each bucket's model once it is compiled
  // and before it is warmed up: loading trained weights into its params
  // (weights). An exception it throws fails the Server's construction.
  std::function<void(const compiler::backends::CompiledModel& model)> prepare_model;
  // How often a worker refreshes what Server::backend_snapshot() reports
  // (its tree's counters and pool, which only the worker's thread may read):
  // after a batch, when the last refresh is older than this.
  std::chrono::milliseconds backend_snapshot_period{500};
  // Note [One input copy per batch] (device_worker.h): a batch whose rows lie
  // apart in host memory is gathered into a pinned staging and copied in one
  // call per input. false: one copy per run of adjacent rows, as before (the
  // A/B of the default: the serving benchmarks' --copy-rows-apart).
  bool gather_inputs = true;
  // Note [A batch due after the wait runs before the answers] (device_worker.h):
  // a batch that fell due while the worker waited for the device is launched
  // before the batch waited for is answered. Off by default: on the H100 it
  // did not raise throughput (serve_http's --launch-after-wait is the A/B).
  bool launch_after_wait = false;

  // Throws ConfigError naming the field, its value and the allowed range.
  void validate() const;
  // devices, or {default_device()} when empty.
  std::vector<runtime::Device> resolved_devices() const;
  // The smallest bucket holding `rows` (rows <= max_batch).
  int64_t bucket_for(int64_t rows) const;
};

}  // namespace grove::serving
