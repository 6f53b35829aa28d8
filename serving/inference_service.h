// InferenceService is what a front end (serving/http_server.h) needs of a
// batching server: submit rows, the model's signature and max batch, and the
// counters it reports. Server is one; ReplanningServer, which replaces its
// Server when traffic calls for other buckets, is another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <vector>

#include "serving/model_signature.h"
#include "serving/request.h"
#include "serving/server_stats.h"
#include "serving/worker_reports.h"

namespace grove::serving {

class InferenceService {
 public:
  virtual ~InferenceService() = default;
  // Server::submit(): the request's future, or ShapeError / DTypeError /
  // QueueFullError / ServerClosedError with nothing queued.
  virtual std::future<Response> submit(Request request) = 0;
  // submit(), and `on_ready` is called (on the thread that sets the future,
  // which must not block) once the future is ready, so that an event-driven
  // front end needs no thread per waiting request
  // (Note [Answers without a waiting thread]).
  virtual std::future<Response> submit_then(Request request, std::function<void()> on_ready) = 0;
  // submit_then() of a request a protocol front already checked against
  // signature() (Note [Requests checked once]): Server and ReplanningServer
  // check it no more. By default it is submitted as a Request (checked again).
  virtual std::future<Response> submit_then(CheckedRequest request,
                                            std::function<void()> on_ready) {
    return submit_then(std::move(request).release(), std::move(on_ready));
  }
  // Queues `request` like submit_then(), and hands its answer to `on_answer`
  // instead of setting a future (Note [Answers without a future],
  // request.cc); throws as submit() does, calling nothing. By default
  // through submit_then().
  virtual void submit_then_answer(CheckedRequest request, OnAnswer on_answer);
  virtual const ModelSignature& signature() const = 0;
  virtual int64_t max_batch() const = 0;
  // Counters since the service started (monotonic, as Prometheus wants them).
  virtual ServerStats stats() const = 0;
  virtual size_t queue_size() const = 0;
  // One entry per device: Server::backend_snapshots().
  virtual std::vector<WorkerSnapshot> backend_snapshots() const = 0;
};

}  // namespace grove::serving
