// AnswerInbox hands answers to one event loop of the HTTP front from other
// threads (the batching worker's on_ready): answers that arrive while the
// loop has not yet run the earlier ones wait in the inbox and are run
// together, so a batch of answers wakes each loop once (Note [Answers woken
// once per batch]).
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <mutex>
#include <vector>

namespace grove::serving {

// What an inbox hands an answer to (an HttpConnection waiting for one).
class AnswerTaker {
 public:
  // On the inbox's loop: the answer is ready (HttpRoutes::complete()).
  virtual void take_answer() = 0;

 protected:
  ~AnswerTaker() = default;
};

class AnswerInbox {
 public:
  explicit AnswerInbox(boost::asio::io_context& loop) : loop_(loop) {}
  AnswerInbox(const AnswerInbox&) = delete;
  AnswerInbox& operator=(const AnswerInbox&) = delete;

  // Any thread: calls `taker`'s take_answer() on the loop, after the answers
  // posted before it (Note [An answer handed on without allocations]).
  void post(std::shared_ptr<AnswerTaker> taker);

 private:
  void run();

  boost::asio::io_context& loop_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<AnswerTaker>> waiting_;
  std::vector<std::shared_ptr<AnswerTaker>> running_;  // the loop's: its capacity is kept
  bool scheduled_ = false;  // a run() is posted and has not yet taken waiting_
};

}  // namespace grove::serving
