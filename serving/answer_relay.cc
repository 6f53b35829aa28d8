#include "serving/answer_relay.h"

#include <utility>

namespace grove::serving {

// Note [Answers handed on by a relay]
// The worker answers a batch's requests one after another, and each answer
// must reach the event loop of its connection: a post to a sleeping loop is
// a system call and a wake-up on the worker's thread, and a batch of 64
// answers reaches every loop. The worker's turn around a batch is the
// cudagraphs server's limit: on the H100 (max batch 64) it kept up with
// 256,000 answers/s in process, so at most 3.9 us of its time per answer,
// but took 4.8 us per answer behind the HTTP front (serve_http's worker
// us/req), which answered 178,000/s where the server alone answered
// 256,000. So the HTTP front (HttpConfig::answer_relay, on unless
// --no-answer-relay) has the worker append each answer to the relay's list
// instead, waking the relay's thread only when it sleeps (at most once per
// burst), and the relay makes the posts, in order, off the worker's thread.
// On the H100 (one lease, one run each, 64 clients x 4 connections, binary):
// max batch 16, 168,293 -> 188,265 answers/s (worker 5.5 -> 4.7 us per
// answer); max batch 64, 172,253 -> 165,693 (4% fewer; one run each). The
// cost is one more thread hop per answer, which on a machine with fewer
// cores than busy threads adds the wait for that thread to be scheduled.
// Since Note [Answers delivered off the worker] the request reaper, not the
// worker, calls on_ready and so posts to the relay; the relay then spares
// the reaper the loops' wakes, at the cost of its own hop. On sim (2 cores,
// serve_http, gelu512, 30,000/s) the front took 1-1.5 us less CPU per
// request without it; on the H100 only the relay was measured with the
// reaper delivering (no regression), so it stays on until both are.
// Tests: test_without_answer_relay_each_client_gets_its_rows_and_drains
// (the reaper's own posts; every other test of tests/serving/
// http_server_test.py and http_abuse_test.py goes through the relay),
// AnswerRelay.* (tests/serving/answer_relay_test.cc).
AnswerRelay::AnswerRelay()
    : thread_("grove-relay", [](std::vector<HandOff>& hand_offs) {
        for (HandOff& hand_off : hand_offs) {
          if (hand_off.inbox != nullptr) {
            hand_off.inbox->post(std::move(hand_off.taker));
          } else {
            hand_off.hand_on();
          }
        }
      }) {}

AnswerRelay::~AnswerRelay() = default;

void AnswerRelay::post(std::function<void()> hand_on) {
  thread_.hand(HandOff{.hand_on = std::move(hand_on)});
}

void AnswerRelay::post(AnswerInbox& inbox, std::shared_ptr<AnswerTaker> taker) {
  thread_.hand(HandOff{.inbox = &inbox, .taker = std::move(taker)});
}

}  // namespace grove::serving
