// Generations decide when a path of warm-ups, recordings or replays may end.
// By default every top-level call through the manager starts a new
// generation (an InvocationScope groups the calls of one compiled callable,
// e.g. its segments, into one). A forward that has run without its backward
// holds the generation open so that the backward becomes the forward's child.
// Once mark_step_begin() is used, only mark_step_begin() advances generations
// and pending backwards no longer matter.
//
// Note [Several backwards per step]
// All the backwards that follow forwards stay in the forwards' generation,
// however many there are (two forwards and then their two backwards, as in
// micro-batch gradient accumulation): the first backward clears the pending
// flag, but the backwards after it still read activations the forwards saved,
// so only a call of another mode (the next forward) or mark_step_begin() ends
// the generation. Backwards called without a forward before them start
// generations as any top-level call does. Test:
// TreeGenerations.TwoForwardsThenTwoBackwardsStayInOneGenerationAndMatchEager.
//
// This file also writes the messages of outputs invalidated when a
// generation ends (Note [Stale outputs] in tree_manager.cc).
#pragma once

#include <cstdint>
#include <string>

#include "cudagraph_trees/function_registry.h"

namespace grove::cudagraph_trees {

// Note [Invocations of several models]
// A caller that runs several compiled models as one computation (the torch
// door's segments around the ops PyTorch runs, dynamo's graphs around a graph
// break) hands outputs of the first to the later ones. Each model's call is a
// top-level call, so without more each would start a generation, end the
// path holding the earlier outputs and reclaim their pool blocks while the
// caller still reads them (HF LLaMA and BERT on cuda: every later segment
// wrote over its inputs). The caller names its invocation on the calling
// thread (OuterInvocation, grove_invocation_begin in the C API): calls under
// the same key share one generation on every manager of the thread, created
// before or during the invocation. Tests:
// TreeGenerations.CallsUnderOneOuterInvocationShareAGeneration,
// ImporterTest.test_split_graph_segments_share_one_generation.
class OuterInvocation {
 public:
  // The calling thread's open invocation key, or 0 when none is open.
  static uint64_t current();
  // Opens an invocation on the calling thread: `key` 0 takes a fresh key;
  // another key (below 2^63) is the caller's own, and calls under the same
  // key in a later invocation continue its generation. Nested begins keep
  // the outermost key.
  static void begin(uint64_t key);
  static void end();
};

// Note [A training step begins with its named invocation]
// A training forward begins a step (Note [Training steps],
// prepared_program.cc) for callers that run forward, backward and optimizer
// as separate calls (the Trainer). A caller that names its invocations
// (dynamo's generation, through the torch door) may run other graphs before
// the forward in the same invocation: a graph break's first graph, which needs
// no gradient, hands its output to the training graph. Were the forward to
// begin a step there, it would end the generation and reclaim the memory of
// the very output it reads (HF OPT trained through the door: StaleTensorError
// at the first step). So under a named key the forward begins no step: the
// invocation began it, as in PyTorch's cudagraph trees, where a generation is
// dynamo's top-level call. Once forwards have marked steps (which makes
// generations follow marks only), a new named invocation is a new step too,
// unless a forward still waits for its backward; marks of the caller's own
// keep the caller in charge. Fresh keys (the door's calls outside dynamo,
// grove.invocation()) keep the forward's mark. Tests:
// CudagraphsTraining.AForwardFedInsideItsNamedInvocationMatchesEagerAndReplays
// (tests/cudagraph_trees/backend/cudagraphs_training_test.cc) and
// GpuTorchTrainingTest.test_a_graph_without_gradients_feeds_a_training_graph.
// Note [An optimizer step continues its training step]
// A training step's optimizer update (the Trainer's optimizer stage,
// grove.torch.optim) is a call of its own after the backward, and it reads
// the gradients the backward left in the pool. Where generations follow
// invocations (Note [A training step begins with its named invocation]: the
// door's forwards under dynamo's keys mark no step), that call would start a
// new generation and reclaim those gradients before it reads them. So an
// optimizer stage's call that directly follows the step's backwards (no other
// call between) continues their generation; the next call of any other kind
// starts one as before. Where marks rule, nothing changes. Tests:
// OptimizerTest.test_the_update_continues_a_step_whose_forward_ran_in_a_named_invocation
// (tests/python/training_test.py) and GpuTorchTrainingTest.test_grove_optim_adamw.
class GenerationTracker {
 public:
  // A call through the manager; outside an invocation scope it is top-level.
  void note_call() {
    if (scope_depth_ == 0) start_invocation();
  }
  void begin_scope() {
    if (scope_depth_++ == 0) start_invocation();
  }
  void end_scope();
  // The caller's mark (mark_step_begin(), torch.compiler.cudagraph_mark_step_begin).
  void mark_step_begin() {
    ++steps_;
    mark_step_used_ = true;
    caller_marks_ = true;
  }
  // A training forward's step (Note [Training steps], prepared_program.cc),
  // unless the step began with the caller's named invocation (Note [A
  // training step begins with its named invocation]).
  void begin_training_step() {
    if (named(OuterInvocation::current())) return;
    ++steps_;
    mark_step_used_ = true;
  }
  // Note [An optimizer step continues its training step]
  void continue_training_step() { continue_step_ = backwards_of_forwards_; }
  void after_call(CompilationMode mode) {
    continue_step_ = false;
    if (mode == CompilationMode::kBackward) {
      // Note [Several backwards per step].
      backwards_of_forwards_ = backwards_of_forwards_ || pending_backward_;
      pending_backward_ = false;
      return;
    }
    backwards_of_forwards_ = false;
    if (mode == CompilationMode::kForward) pending_backward_ = true;
  }

  // Steps are negative so that the first mark_step_begin() is a new generation too.
  int64_t current() const { return mark_step_used_ ? -steps_ : invocations_; }
  bool mark_step_used() const { return mark_step_used_; }
  bool pending_backward() const { return pending_backward_; }
  bool in_new_generation(int64_t last) const { return current() != last; }
  // Whether a call of a function of `mode` may end the generation `last`.
  bool can_start_new_generation(int64_t last, CompilationMode mode) const {
    return current() != last &&
           (mark_step_used_ ||
            !(pending_backward_ || (backwards_of_forwards_ && mode == CompilationMode::kBackward)));
  }
  // The current generation is new but a forward still waits for its backward.
  bool blocked_by_pending_backward(int64_t last) const {
    return current() != last && !mark_step_used_ && pending_backward_;
  }

 private:
  // A new invocation, unless the thread's outer invocation already started one here.
  void start_invocation() {
    const uint64_t outer = OuterInvocation::current();
    if (outer != 0 && outer == last_outer_) return;
    last_outer_ = outer;
    if (continue_step_) return;  // Note [An optimizer step continues its training step]
    ++invocations_;
    // Note [A training step begins with its named invocation]: where only
    // training forwards marked steps, a new named invocation is a new step.
    if (mark_step_used_ && !caller_marks_ && named(outer) && !pending_backward_) ++steps_;
  }
  // A key the caller named (dynamo's generation): not 0 (none open), not fresh.
  static bool named(uint64_t outer) { return outer != 0 && outer < (uint64_t{1} << 63); }

  int64_t invocations_ = 0;
  uint64_t last_outer_ = 0;  // the outer invocation of the last top-level call
  int64_t steps_ = 0;
  int scope_depth_ = 0;
  bool mark_step_used_ = false;
  bool caller_marks_ = false;   // the marks came from mark_step_begin(), not only from forwards
  bool continue_step_ = false;  // the next top-level call is the step's optimizer update
  bool pending_backward_ = false;
  // The last calls were backwards that followed forwards.
  bool backwards_of_forwards_ = false;
};

// Where an invalidated output came from, for its message.
struct StaleOutputOrigin {
  std::string function_name;
  CompilationMode mode = CompilationMode::kInference;
  size_t output_index = 0;
  int64_t node_id = 0;
  bool warmup = false;
  int64_t generation = 0;
};

std::string stale_output_message(const StaleOutputOrigin& origin);
std::string shutdown_output_message(const StaleOutputOrigin& origin);
std::string pending_backward_message(const std::string& function_name);

}  // namespace grove::cudagraph_trees
