#include "serving/answer_relay.h"

#include <pthread.h>

#include <utility>

namespace grove::serving {

// Note [Answers handed on by a relay]
// The worker answers a batch's requests one after another, and each answer
// must reach the event loop of its connection: a post to a sleeping loop is
// a system call and a wake-up on the worker's thread, and a batch of 64
// answers reaches every loop. On the H100 the worker, whose turn around a
// batch is the cudagraphs server's limit, took about 1 us more per answer
// behind the HTTP front than in process (serve_http's worker us/req), so the
// front answered 178,000/s at max batch 64 where the server alone answered
// 256,000. With HttpConfig::answer_relay the worker appends each answer to
// the relay's list instead and wakes the relay's thread only when it sleeps
// (at most once per burst), and the relay makes the posts, in order, off the
// worker's thread; the cost is one more thread hop per answer, which on a
// machine with fewer cores than busy threads adds the wait for that thread
// to be scheduled. Tests: the HTTP infer tests of tests/serving/
// http_server_test.py run with --answer-relay; AnswerRelay.* (tests/serving/
// answer_relay_test.cc).
AnswerRelay::AnswerRelay() : thread_([this] { run(); }) {}

AnswerRelay::~AnswerRelay() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void AnswerRelay::post(std::function<void()> hand_on) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(std::move(hand_on));
    wake = sleeping_;
    sleeping_ = false;
  }
  if (wake) wake_.notify_one();
}

void AnswerRelay::run() {
  pthread_setname_np(pthread_self(), "grove-relay");
  std::vector<std::function<void()>> running;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (waiting_.empty() && !stopping_) {
        sleeping_ = true;
        wake_.wait(lock);
      }
      sleeping_ = false;
      if (waiting_.empty()) return;  // stopping, and every hand-off ran
      running.swap(waiting_);
    }
    for (std::function<void()>& hand_on : running) hand_on();
    running.clear();
  }
}

}  // namespace grove::serving
