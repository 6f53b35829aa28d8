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
//
// Note [Two batches in flight]
// The worker keeps the device busy while it does its host work: when the
// queue has a batch due while the previous one still runs, it takes, stages
// and launches it right away, queued on the stream behind the running batch,
// and only then waits for the previous batch's rows and answers its
// requests, while the device works on both. When no batch is due the worker
// finishes the running batch first, so a lone request is never held back
// waiting for company. Each request is still answered exactly once, in FIFO
// order.
//
// Note [A batch due after the wait runs before the answers]
// When no batch was due as the worker turned to the running one, it waits
// for the device; requests keep arriving meanwhile, and the oldest may reach
// max_wait. A batch due once the wait ends is launched then, before the
// waited batch's requests are answered, so the device works while the worker
// answers instead of idling until the next turn (the answers of a batch of
// 64 took about 100 us of the worker's time on the H100). Its staging is the
// other parity, whose batch was answered the turn before, as in Note [Two
// batches in flight]; batching itself is unchanged (the same due rule).
// ServerStats::launches_after_wait counts them. Off by default
// (ServerConfig::launch_after_wait): on the H100 (serve_http, max batch 64,
// cudagraphs, 320,000/s offered) it changed answered/s by -4% to +12% from
// run to run (session 18, r1 and r2), and once the answers took 45 us a
// batch of 64 instead of 100-160 (Note [Row bytes copied in one call]) the
// device had little to wait through; launching early also makes batches
// smaller. Test:
// LaunchAfterWait.ABatchDueDuringTheWaitIsLaunchedBeforeTheAnswers and
// LaunchAfterWait.TurnedOffTheDueBatchWaitsForTheNextTurn.
//
// Note [Asynchronous staging]
// launch() puts each input's rows on the device in one copy (Note [One input
// copy per batch]), enqueues the model and the device-to-host copy of each
// output's real rows into a pinned output staging, and records an event;
// nothing waits. read_back() waits for that event only. Copies from pinned
// memory are asynchronous (from pageable memory CUDA stages them
// synchronously), so the device never idles for a copy while the host
// answers. The requests of a batch, and so their rows, live until the batch
// is answered, after its event. Two sets of stagings (input and output)
// alternate between batches: batch N+1 is launched while batch N's copies may
// still be pending and while its rows are being answered, and batch N+2
// reuses N's stagings only after N was read back and answered.
//
// Note [One input copy per batch]
// A copy call costs the host a few microseconds and the device one or two,
// whatever its size, and the rows of a batch's requests seldom lie next to
// each other (each front allocates them on its own): copied request by
// request, a batch of 64 one-row requests took 64 copies (H100, session 15:
// 212,939 copies for 219,336 rows in process, ~7 us of the worker per
// answer). So launch() copies an input straight from the requests' rows only
// when they form one run in host memory; otherwise it gathers them (memcpy,
// a few KB) into the batch's pinned input staging, zeroes the padded rows
// there, and copies the whole bucket in one call. A/B in one call on the
// H200 host (serve, mlp16x512, 400,000/s offered; --copy-rows-apart the
// old way): max batch 64, cudagraphs 164,896 -> 270,571 answers/s (the
// worker's launch 170 -> 26 us per batch), eager 91,555 -> 148,338; over
// HTTP, max batch 16, binary cudagraphs 147,164 -> 183,751. Test:
// ServerTest.RequestBytesAreCopiedOnceToTheDevice (one copy per input per
// batch).
// Everything on the device is ordered by the one stream: N+1's input copies
// run after N's model, and N+1's replay, which may reuse the memory of N's
// graph outputs, runs after N's copy-back; so graph outputs may be dropped as
// soon as their copy-back is enqueued. An output whose rows are not
// contiguous is gathered synchronously by read_back(), which then runs before
// the next launch.
#pragma once

#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "compiler/backends/compile.h"
#include "runtime/pinned_host_buffer.h"
#include "serving/model_signature.h"
#include "serving/request_queue.h"
#include "serving/request_reaper.h"
#include "serving/server_config.h"
#include "serving/server_stats.h"
#include "serving/worker_reports.h"

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
  // The warm-up and the worker thread's tree ("cudagraphs" only): after
  // warm-up, and once the thread has ended.
  WorkerReport report() const;
  // The tree and the backend's memory (CompiledModel::backend_memory()) as
  // the worker last refreshed them. Any thread.
  WorkerSnapshot backend_snapshot() const;

 private:
  struct Bucket {
    int64_t rows = 0;
    std::optional<compiler::backends::CompiledModel> model;
    compiler::TensorList inputs;  // device tensors [rows, ...], one per model input
    // `inputs`, checked once by the model (Note [Requests checked once]).
    compiler::backends::BoundInputs bound;
  };

  // A batch between launch() and answer().
  struct InFlight {
    std::vector<PendingRequest> requests;
    int64_t rows = 0;         // real rows
    int64_t bucket_rows = 0;  // the bucket it runs in
    Clock::time_point dispatched;
    Clock::time_point completed;
    size_t staging = 0;  // which input and output stagings it uses
    bool read = false;   // read_back() has run
    // Outputs whose rows are not contiguous, gathered by read_back().
    std::vector<std::pair<size_t, runtime::Tensor>> strided_outputs;
    runtime::EventHandle done{};  // recorded after its copy-back (Note [Asynchronous staging])
    std::exception_ptr error;     // the failure of the whole batch, if any
  };

  void thread_main(std::promise<void>& ready);
  void prepare();
  // Note [Two batches in flight].
  void serve();
  // Copies the batch's input rows into its bucket, pads it and enqueues the
  // bucket's model; never throws (a failure is kept in `error`).
  InFlight launch(std::vector<PendingRequest> batch);
  // Note [One input copy per batch]: input k of `run` onto the bucket's
  // device input, padded with zero rows; returns the copies it enqueued.
  uint64_t stage_input(const InFlight& run, size_t k, const Bucket& bucket);
  // ServerConfig::gather_inputs off: one copy per run of adjacent rows.
  uint64_t copy_rows_apart(const InFlight& run, size_t k, uint8_t* device_rows,
                           size_t bucket_bytes);
  // Waits until the batch's rows are in its output staging; never throws.
  void read_back(InFlight& batch);
  // Counts the batch and gives every request its answer (its rows or the
  // error), which the reaper delivers (Note [Answers delivered off the worker]).
  void answer(InFlight& batch);
  // The tree of this thread that every bucket runs in ("cudagraphs" only).
  std::optional<runtime::GraphTreeStats> tree_stats() const;
  // The door's input checks of every bucket's model so far.
  uint64_t door_checks() const;
  // Re-reads backend_snapshot() on the worker thread.
  void refresh_snapshot();
  // Drops every bucket's recordings (through its model's backend) and the models.
  void release_buckets();
  // Frees the pinned output stagings and their events (the stream is idle then).
  void release_staging();

  const runtime::Device device_;
  std::vector<compiler::ir::Program> programs_;
  const ServerConfig& config_;
  const ModelSignature& signature_;
  RequestQueue& queue_;
  StatsRecorder& stats_;
  std::vector<Bucket> buckets_;
  // Note [Asynchronous staging]: two sets, used by batches in turn: per
  // input and per output the largest bucket's rows, and one event per set.
  std::vector<runtime::PinnedHostBuffer> input_staging_[2];
  std::vector<runtime::PinnedHostBuffer> output_staging_[2];
  runtime::EventHandle staging_done_[2]{};
  size_t next_staging_ = 0;
  uint64_t door_checks_counted_ = 0;  // door_checks() already in stats_
  // Note [Answered requests freed off the worker]; made and dropped by the thread.
  std::optional<RequestReaper> reaper_;
  std::thread thread_;
  double warmup_ms_ = 0;
  std::optional<runtime::GraphTreeStats> tree_after_warmup_;
  std::optional<runtime::GraphTreeStats> tree_at_exit_;
  mutable std::mutex snapshot_mutex_;
  WorkerSnapshot snapshot_;
  Clock::time_point snapshot_at_;
};

}  // namespace grove::serving
