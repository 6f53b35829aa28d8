#include "serving/http_answer_inbox.h"

#include <boost/asio/post.hpp>
#include <utility>

namespace grove::serving {

// Note [Answers woken once per batch]
// The worker answers a batch's requests one after another, and each answer
// must reach its connection's loop. A post per answer woke a sleeping loop
// per answer (a syscall on the worker's thread to interrupt epoll_wait, and a
// wake-up of the loop's thread), so the worker paid for up to max-batch
// wake-ups per batch. Each loop has an inbox instead: the first answer of a
// burst posts one run() to the loop, the ones after it only join the list,
// and run() takes the whole list at once. Order is kept: answers run in the
// order posted. Tests: test_connections_on_every_loop_are_answered
// (tests/serving/http_abuse_test.py), every infer test of
// tests/serving/http_server_test.py.
void AnswerInbox::post(std::shared_ptr<AnswerTaker> taker) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(std::move(taker));
    wake = !scheduled_;
    scheduled_ = true;
  }
  if (wake) boost::asio::post(loop_, [this] { run(); });
}

void AnswerInbox::run() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.swap(waiting_);
    scheduled_ = false;
  }
  for (const std::shared_ptr<AnswerTaker>& taker : running_) taker->take_answer();
  running_.clear();
}

}  // namespace grove::serving
