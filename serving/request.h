// What a client hands the server and what it gets back.
//
// Note [What a request is]
// A request is one or more rows for the model: one HostRows per model `input`
// (call order), all with the same row count n (1 <= n <= max_batch) and each
// row shaped and typed like one row of that input. Its response holds one
// HostRows per model output with exactly the request's n rows, in the order
// they were given. The server never splits a request across batches, never
// reorders requests (FIFO), and copies each request's rows out of the batch
// output before the worker runs its next batch: with "cudagraphs" the batch
// output lives in the graph pool and the next replay overwrites it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <vector>

#include "runtime/device.h"
#include "serving/host_rows.h"

namespace grove::serving {

using Clock = std::chrono::steady_clock;

struct Request {
  std::vector<HostRows> inputs;  // one per model input
};

// Where and when a request ran.
struct RequestTiming {
  Clock::time_point submitted;   // submit() accepted it
  Clock::time_point dispatched;  // its batch left the queue
  Clock::time_point completed;   // its rows were copied out, just before the future is set
  int64_t batch_rows = 0;        // real rows in its batch
  int64_t bucket = 0;            // the compiled batch size the batch ran in
  runtime::Device device;        // the worker's device
};

struct Response {
  std::vector<HostRows> outputs;  // one per model output, this request's rows only
  RequestTiming timing;
};

// A request's answer handed to a front without a future (Note [Answers
// without a future], request.cc): its response, or the error its batch met
// (or RequestCancelledError).
struct RequestAnswer {
  std::optional<Response> response;
  std::exception_ptr error;
};
// Called once with the answer, on the thread that delivers answers (the
// request reaper's): it must only hand the answer on, never block.
using OnAnswer = std::function<void(RequestAnswer answer)>;

// A request the server accepted, waiting for (or in) a batch.
struct PendingRequest {
  Request request;
  int64_t rows = 0;
  uint64_t id = 0;  // submission order
  Clock::time_point submitted;
  // Made by submit() and submit_then() only (Note [No promise without a
  // future]); answer_request() sets it when there is one.
  std::optional<std::promise<Response>> promise;
  // Called once the promise is set (Note [Answers without a waiting thread]).
  std::function<void()> on_ready;
  // Set instead of the promise and on_ready: Note [Answers without a future].
  OnAnswer on_answer;
  // The worker's answer, which the request reaper delivers (Note [Answers
  // delivered off the worker]): the response, or the error its batch met.
  std::optional<Response> response;
  std::exception_ptr error;
};

// Sets the request's promise, then calls its on_ready; or calls its on_answer.
void answer_request(PendingRequest& request, Response response);
void fail_request(PendingRequest& request, std::exception_ptr error);
// answer_request() with the request's response, or fail_request() with its
// error; nothing for a request holding neither.
void deliver_answer(PendingRequest& request);

}  // namespace grove::serving
