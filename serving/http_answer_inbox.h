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

#include "serving/answer_relay.h"

namespace grove::serving {

class AnswerInbox {
 public:
  // `relay`: the thread that makes the posts for the batching worker's side
  // (Note [Answers handed on by a relay]), or none.
  AnswerInbox(boost::asio::io_context& loop, AnswerRelay* relay) : loop_(loop), relay_(relay) {}
  AnswerInbox(const AnswerInbox&) = delete;
  AnswerInbox& operator=(const AnswerInbox&) = delete;

  // Any thread: runs `answer` on the loop, after the answers posted before it.
  void post(std::function<void()> answer);
  AnswerRelay* relay() const { return relay_; }

 private:
  void run();

  boost::asio::io_context& loop_;
  AnswerRelay* const relay_;
  std::mutex mutex_;
  std::vector<std::function<void()>> waiting_;
  std::vector<std::function<void()>> running_;  // the loop's: its capacity is kept
  bool scheduled_ = false;                      // a run() is posted and has not yet taken waiting_
};

}  // namespace grove::serving
