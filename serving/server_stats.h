// What a batching server has done: requests by outcome, batches, how full the
// batches were, and padding. ServerStats is a snapshot (a value);
// StatsRecorder is the thread-safe counter set the server updates.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

namespace grove::serving {

struct ServerStats {
  uint64_t submitted = 0;  // accepted by submit()
  uint64_t rejected = 0;   // QueueFullError (back-pressure)
  uint64_t invalid = 0;    // refused by submit() as malformed (shape, dtype, row count)
  uint64_t completed = 0;  // futures set with a response
  uint64_t failed = 0;     // futures set with an error from running their batch
  uint64_t cancelled = 0;  // futures set with RequestCancelledError at shutdown
  uint64_t batches = 0;
  uint64_t rows = 0;         // real rows run
  uint64_t padded_rows = 0;  // zero rows added to reach a bucket
  int64_t largest_batch_rows = 0;
  std::map<int64_t, uint64_t> batches_by_rows;    // real rows per batch -> batches
  std::map<int64_t, uint64_t> batches_by_bucket;  // bucket -> batches
  // Note [Requests checked once]: shape and dtype checks of requests (one per
  // request), and the door's checks of batches (none: inputs bound at warm-up).
  uint64_t request_checks = 0;
  uint64_t door_checks = 0;
  // Note [Request bytes copied once]: request bytes copied from the host rows
  // the fronts decoded them into to the device, and the copies that took.
  uint64_t request_bytes_to_device = 0;
  uint64_t request_copies_to_device = 0;
  // Where the batching workers' time went (steady clock, ns, summed over
  // batches and workers): staging and enqueueing batches (launch), waiting
  // for the device to finish them (wait), and answering their requests
  // (answer). What is left of a worker's wall time it spent waiting for
  // requests (Note [Two batches in flight], device_worker.h).
  uint64_t worker_launch_ns = 0;
  uint64_t worker_wait_ns = 0;
  uint64_t worker_answer_ns = 0;
  // Batches launched after a wait for the device, before its batch was
  // answered (Note [A batch due after the wait runs before the answers]).
  uint64_t launches_after_wait = 0;

  // Accepted requests not yet answered (queued or in a running batch).
  uint64_t pending() const { return submitted - completed - failed - cancelled; }
  double mean_batch_rows() const { return batches ? double(rows) / double(batches) : 0; }
  // Real rows over bucket rows run: 1 when no batch was padded.
  double mean_batch_fill() const {
    return rows + padded_rows ? double(rows) / double(rows + padded_rows) : 0;
  }
  nlohmann::json to_json() const;
};

// GROVE_SERVING_CONTENDED=1 (read once per process): count submissions
// under the stats lock, take batches element by element, count and observe
// latencies on shared atomics, make a promise per request and capture
// on_ready in the HTTP OnAnswer, as before Notes [Submissions counted without
// the lock], [A batch taken in one move], [Counters per thread], [Histograms
// counted per thread], [No promise without a future] and [An OnAnswer without
// an allocation]. Their A/B (r2 of session 23, H200 host, serve_http, max
// batch 64, cudagraphs, 640,000/s offered, alternated): binary 445,330 and
// 334,573 answers/s against 264,154 and 248,235 with the switch, the worker's
// launch 36.7-40.4 against 49.2-52.2 us per batch of 64 and the reaper 0.9
// against 1.3 us per answer; JSON 274,787 and 189,729 against 220,837 and
// 171,940 (benchmarks/session23_logs/wt-serve/r2).
bool serving_contended_as_before();

// Note [Submissions counted without the lock]
// Every front thread counts each request it submits, and under a mutex that
// the batching worker also takes several times per batch, 24 HTTP loops at
// ~500,000 requests/s queued on it behind each other and behind the worker.
// So `submitted` is an atomic beside the locked counters: a snapshot reads it
// after them, and since a request is counted submitted before it is queued,
// and counted answered under the lock after the worker took it, a snapshot
// never counts an answer whose submission it missed (pending() >= 0).
// GROVE_SERVING_CONTENDED=1 counts it under the lock again (the A/B of
// session 23, with Note [A batch taken in one move]). Tests: ServerTest.*
// (stats after answers), StatsRecorder.SubmissionsCountedFromManyThreads.
class StatsRecorder {
 public:
  StatsRecorder();
  void submitted();
  // Undoes submitted() for a request the queue refused (full, or closed).
  void not_queued(bool queue_full);
  void invalid() { bump(&ServerStats::invalid); }
  void completed(uint64_t count) { bump(&ServerStats::completed, count); }
  void failed(uint64_t count) { bump(&ServerStats::failed, count); }
  void cancelled(uint64_t count) { bump(&ServerStats::cancelled, count); }
  void batch(int64_t rows, int64_t bucket);
  void door_checks(uint64_t count) { bump(&ServerStats::door_checks, count); }
  void copied_to_device(uint64_t bytes, uint64_t copies);
  void worker_time(uint64_t launch_ns, uint64_t wait_ns, uint64_t answer_ns);
  void launched_after_wait() { bump(&ServerStats::launches_after_wait); }
  ServerStats snapshot() const;

 private:
  void bump(uint64_t ServerStats::*field, uint64_t count = 1);

  const bool locked_submissions_;  // GROVE_SERVING_CONTENDED=1: the old way
  std::atomic<uint64_t> submitted_{0};
  mutable std::mutex mutex_;
  ServerStats stats_;
};

}  // namespace grove::serving
