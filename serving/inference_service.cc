#include "serving/inference_service.h"

#include <atomic>
#include <memory>
#include <utility>

namespace grove::serving {

void InferenceService::submit_then_answer(CheckedRequest request, OnAnswer on_answer) {
  // The future is assigned once submit_then() returns and on_ready may run
  // before that: whichever of the two comes second reads it and hands it on.
  struct Waiting {
    std::future<Response> future;
    OnAnswer on_answer;
    std::atomic<int> pending{2};
    void arrive() {
      if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      RequestAnswer answer;
      try {
        answer.response = future.get();
      } catch (...) {
        answer.error = std::current_exception();
      }
      on_answer(std::move(answer));
    }
  };
  auto waiting = std::make_shared<Waiting>();
  waiting->on_answer = std::move(on_answer);
  waiting->future = submit_then(std::move(request), [waiting] { waiting->arrive(); });
  waiting->arrive();
}

}  // namespace grove::serving
