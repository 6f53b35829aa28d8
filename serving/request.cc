#include "serving/request.h"

namespace grove::serving {

// Note [Answers without a waiting thread]
// An event-driven front end (serving/http_server.h) holds thousands of
// connections on a few threads, so it cannot park a thread on each request's
// future. It submits with submit_then(request, on_ready) instead: the worker
// sets the future and then calls on_ready, which only hands the answer to the
// connection's own thread (asio::post) and returns. on_ready runs after the
// promise is set, so the future it wakes is always ready. Tests
// (tests/serving/http_abuse_test.py):
// test_sigterm_under_keep_alive_load_answers_every_request,
// test_many_slow_connections_do_not_starve_others.
void answer_request(PendingRequest& request, Response response) {
  request.promise.set_value(std::move(response));
  if (request.on_ready) request.on_ready();
}

void fail_request(PendingRequest& request, std::exception_ptr error) {
  request.promise.set_exception(std::move(error));
  if (request.on_ready) request.on_ready();
}

void deliver_answer(PendingRequest& request) {
  if (request.error) return fail_request(request, request.error);
  if (request.response) answer_request(request, std::move(*request.response));
}

}  // namespace grove::serving
