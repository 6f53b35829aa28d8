#include "serving/request_reaper.h"

#include <utility>

namespace grove::serving {

// Note [Answered requests freed off the worker]
// Freeing a request is several frees of memory other threads allocated (its
// rows in the pinned pool, its shape, its on_ready callback, its promise's
// share), which glibc returns to the allocating thread's arena under that
// arena's lock. On the H200 host (serve, mlp16x512, cudagraphs, one
// submitter) the worker spent 43 us of a 71 us turn per batch of 16
// answering, 195 of 227 us per batch of 64: about 3 us per request, the
// cudagraphs server's limit. So the worker hands each answered batch's
// requests to this thread under one lock, waking it only when it sleeps,
// and goes on to the next batch (since then the reaper also delivers the
// answers, Note [Answers delivered off the worker]); Server::shutdown() and
// the worker's end wait for it (the reaper is the worker's member). With
// the per-thread row caches (Note [Pinned blocks cached per thread]) and
// one input copy per batch, the H100 (serve, one call, main -> this)
// answered 124,829 -> 216,674/s (max batch 16) and 131,798 -> 250,191/s
// (64) in process; answering still took ~2 us per request of the worker.
// Tests: ServerTest.* (every request answered once, shutdown drains),
// RequestReaper.FreesEveryRequestItIsHanded.
// Note [Answers delivered off the worker]
// Setting a request's future is a system call whatever waits on it (a
// std::promise is set through std::call_once, whose glibc implementation
// always ends in a futex wake), and its on_ready hands the answer on to a
// front (a post to the answer relay or a gRPC answer thread, which wakes it
// when it sleeps). On sim (serve_http, JSON) the futex per request and the
// relay's wake per batch were most of the worker's answering. So the worker
// only leaves each request its response (or its batch's error) and the
// reaper, which takes the batch anyway, sets the futures and calls the
// on_readys, in the batch's order, before freeing the requests. A client
// now waits for the reaper's turn; Server::shutdown() and the worker's end
// still wait for every answer. Tests: ServerTest.* (every request answered
// once, in order; shutdown drains), RequestReaper.DeliversEachAnswerInOrderOffTheHandingThread.
RequestReaper::RequestReaper()
    : thread_("grove-reaper", [](std::vector<std::vector<PendingRequest>>& answered) {
        for (std::vector<PendingRequest>& batch : answered) {
          for (PendingRequest& request : batch) deliver_answer(request);
        }
        answered.clear();  // the frees the worker no longer makes
      }) {}

RequestReaper::~RequestReaper() = default;

void RequestReaper::hand(std::vector<PendingRequest> requests) {
  if (requests.empty()) return;
  thread_.hand(std::move(requests));
}

}  // namespace grove::serving
