// AnswerRelay hands a front's answers on from the batching worker's thread:
// the worker posts each answer's hand-off (here: a post to a connection's
// event loop) and returns, and the relay's own thread makes the hand-offs, so
// the worker wakes at most one thread per burst of answers (Note [Answers
// handed on by a relay]).
//
//   AnswerRelay relay;                              // starts its thread
//   relay.post([inbox, answer] { inbox->post(answer); });  // any thread
#pragma once

#include <functional>

#include "serving/handoff_thread.h"

namespace grove::serving {

class AnswerRelay {
 public:
  AnswerRelay();
  // Runs every hand-off posted before it, then ends the thread.
  ~AnswerRelay();
  AnswerRelay(const AnswerRelay&) = delete;
  AnswerRelay& operator=(const AnswerRelay&) = delete;

  // Any thread: runs `hand_on` on the relay's thread, after those posted before it.
  void post(std::function<void()> hand_on);

 private:
  HandoffThread<std::function<void()>> thread_;
};

}  // namespace grove::serving
