#include "cudagraph_trees/generations.h"

#include <atomic>

namespace grove::cudagraph_trees {

namespace {

struct OuterState {
  uint64_t key = 0;
  int depth = 0;
};

OuterState& outer_state() {
  thread_local OuterState state;
  return state;
}

}  // namespace

uint64_t OuterInvocation::current() { return outer_state().key; }

void OuterInvocation::begin(uint64_t key) {
  constexpr uint64_t kFresh = uint64_t{1} << 63;
  GROVE_CHECK(key < kFresh, "an invocation key must be below 2^63 (got ", key,
              "); pass 0 for a fresh one");
  OuterState& state = outer_state();
  if (state.depth++ > 0) return;
  static std::atomic<uint64_t> fresh{0};
  state.key = key != 0 ? key : (kFresh | ++fresh);
}

void OuterInvocation::end() {
  OuterState& state = outer_state();
  GROVE_CHECK(state.depth > 0, "an invocation ended that was not begun on this thread");
  if (--state.depth == 0) state.key = 0;
}

void GenerationTracker::end_scope() {
  GROVE_CHECK(scope_depth_ > 0, "end_invocation() without a matching begin_invocation()");
  --scope_depth_;
}

std::string stale_output_message(const StaleOutputOrigin& origin) {
  std::string where =
      str_cat("output ", origin.output_index, " of function '", origin.function_name, "' (",
              origin.warmup ? "warm-up run " : "recording, graph node ", origin.node_id,
              ", generation ", origin.generation, ")");
  if (origin.mode == CompilationMode::kBackward) {
    return str_cat(
        "accessing gradient ", where,
        " whose memory the CUDA graph tree reclaimed when a new generation began. This happens "
        "with gradient accumulation when the gradient buffer was allocated by a captured "
        "backward: allocate stable gradient buffers outside the captured functions before the "
        "first backward (or reset them to none before each backward), or clone the gradient "
        "before the next step if you need to keep it.");
  }
  return str_cat("accessing ", where,
                 " whose memory the CUDA graph tree reclaimed and will overwrite, because a new "
                 "generation began. To keep the tensor across calls, clone it before the next "
                 "call; or call mark_step_begin() before each step so that generations end only "
                 "where you say.");
}

std::string shutdown_output_message(const StaleOutputOrigin& origin) {
  return str_cat("accessing output ", origin.output_index, " of function '", origin.function_name,
                 "' (graph node ", origin.node_id,
                 ") after its CUDA graph tree manager was shut down and its memory pool released; "
                 "clone outputs you need before shutdown()");
}

std::string pending_backward_message(const std::string& function_name) {
  return str_cat("function '", function_name,
                 "': unable to hit the CUDA graph fast path because outputs from a previous step "
                 "still require backward (a forward ran without its backward). Run the backward, "
                 "drop or detach those outputs, or call mark_step_begin() before each step.");
}

}  // namespace grove::cudagraph_trees
