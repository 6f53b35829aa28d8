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

// Note [Answers without a future]
// A std::promise is set through std::call_once, whose glibc implementation
// ends in a futex wake whether or not anyone waits, and its shared state is
// one more allocation per request; the HTTP front never waits on the future,
// it only reads it once on_ready has said it is ready. On the H200 host
// (serve_http, max batch 64, cudagraphs, binary, 480,000/s offered) the
// request reaper, which delivers every answer on one thread, was 69-89% busy
// at 1.5-2.2 us per answer, beside the worker at 85-88%: the serial stages
// were the front's limit. So a front may submit with an OnAnswer instead
// (InferenceService::submit_then_answer): the reaper hands it the response
// (or the error) itself, and no promise is set. The HTTP front does: r2 of
// session 22 (same host, 640,000/s offered, two alternated pairs against
// the same binary taking each answer through a future) measured 345,136 and
// 350,700 JSON and 475,681 and 443,632 binary answers/s against 343,208 and
// 338,056, 442,453 and 427,203, the reaper at 1.3 us per answer (44-59%
// busy) against 2.2-2.3 us (76-93%). Tests:
// ServerTest.AnswersWithoutAFutureReachTheirCallback, KserveRoutes.* (the
// default submit_then_answer over a future), every HTTP test
// (tests/serving/http_server_test.py, http_abuse_test.py).
//
// Note [No promise without a future]
// A default-constructed std::promise allocates its shared state, so every
// request carried one even when answered through an OnAnswer: an allocation
// on the front's thread and a free of another thread's memory on the
// reaper's, per request. So PendingRequest's promise is made only where a
// future is handed out (Server::submit_then). GROVE_SERVING_CONTENDED=1
// makes one for every request, as before (the A/B of session 23). Tests:
// ServerTest.AnswersWithoutAFutureReachTheirCallback, ServerTest.*.
void answer_request(PendingRequest& request, Response response) {
  if (request.on_answer) return request.on_answer(RequestAnswer{std::move(response), nullptr});
  if (request.promise) request.promise->set_value(std::move(response));
  if (request.on_ready) request.on_ready();
}

void fail_request(PendingRequest& request, std::exception_ptr error) {
  if (request.on_answer) return request.on_answer(RequestAnswer{std::nullopt, std::move(error)});
  if (request.promise) request.promise->set_exception(std::move(error));
  if (request.on_ready) request.on_ready();
}

void deliver_answer(PendingRequest& request) {
  if (request.error) return fail_request(request, request.error);
  if (request.response) answer_request(request, std::move(*request.response));
}

}  // namespace grove::serving
