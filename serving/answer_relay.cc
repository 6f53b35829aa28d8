#include "serving/answer_relay.h"

#include <pthread.h>

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
// 256,000. With HttpConfig::answer_relay the worker appends each answer to
// the relay's list instead and wakes the relay's thread only when it sleeps
// (at most once per burst), and the relay makes the posts, in order, off the
// worker's thread; the cost is one more thread hop per answer, which on a
// machine with fewer cores than busy threads adds the wait for that thread
// to be scheduled. Tests: test_answer_relay_gives_each_client_its_rows_and_drains
// (tests/serving/http_server_test.py), AnswerRelay.* (tests/serving/answer_relay_test.cc).
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
