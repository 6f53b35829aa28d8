// AnswerInbox hands answers to one event loop of the HTTP front from other
// threads (the batching worker's on_ready): answers that arrive while the
// loop has not yet run the earlier ones wait in the inbox and are run
// together, so a batch of answers wakes each loop once (Note [Answers woken
// once per batch]).
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <mutex>
#include <vector>

namespace grove::serving {

class AnswerInbox {
 public:
  explicit AnswerInbox(boost::asio::io_context& loop) : loop_(loop) {}
  AnswerInbox(const AnswerInbox&) = delete;
  AnswerInbox& operator=(const AnswerInbox&) = delete;

  // Any thread: runs `answer` on the loop, after the answers posted before it.
  void post(std::function<void()> answer);

 private:
  void run();

  boost::asio::io_context& loop_;
  std::mutex mutex_;
  std::vector<std::function<void()>> waiting_;
  std::vector<std::function<void()>> running_;  // the loop's: its capacity is kept
  bool scheduled_ = false;                      // a run() is posted and has not yet taken waiting_
};

}  // namespace grove::serving
