// The differential check behind the fuzzer: a program compiled with "eager"
// and with "cudagraphs" on the same device, called with the same seeded call
// sequence, must give bitwise equal outputs, mutated inputs and persistent
// state after every call, and the tree manager's verify() must hold.
//
// Note [Fuzz call sequences]: each call draws, from the scenario seed, how
// its inputs are bound (new tensors: new addresses; the previous call's
// tensors overwritten in place: same addresses; the previous call's outputs
// fed back: pool-managed inputs), whether mark_step_begin() starts a new
// generation first, and whether the outputs are kept alive for a few calls or
// dropped at once. A fed-back output may legitimately be stale (its
// generation ended: docs/ARCHITECTURE.md, 4.6); the call is then repeated with copies of
// the values, as a user following the error message would.
//
// Note [Aliased inputs]: fed-back outputs go into any input whose type fits,
// mutated (copy_into) inputs included, and now and then one output into two
// inputs, so calls see inputs sharing memory with each other, with buffers
// and with the tree's pool. The tree must then fall back or copy as eager
// semantics require (cudagraph_trees: Note [Copy-back of mutated inputs],
// Note [Copy-back into the pool], Note [Sources inside placeholders]).
//
//   DifferentialOutcome outcome = run_differential(program, scenario_seed, 8);
//   if (!outcome.passed) std::cout << reduce_failure(program, scenario_seed, 8).json;
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/program.h"

namespace grove::fuzz {

struct DifferentialOutcome {
  bool passed = true;
  std::string failure;  // what differed first, at which call
  int calls = 0;        // calls made on each backend
  int stale_retries = 0;
  int replays = 0;         // of the tree, for the counts the fuzzer reports
  int skipped_checks = 0;  // gradient checks skipped: a kink within the step, huge values
};

// Resets the calling thread's tree managers before and after.
DifferentialOutcome run_differential(const compiler::ir::Program& program, uint64_t scenario_seed,
                                     int calls);

struct ReducedFailure {
  compiler::ir::Program program;
  std::string failure;
  std::string json;  // export_model(program)
  int attempts = 0;
};

// Drops outputs and bypasses nodes while the scenario still fails; returns the
// smallest failing program found (within `max_attempts` re-runs).
ReducedFailure reduce_failure(const compiler::ir::Program& program, uint64_t scenario_seed,
                              int calls, int max_attempts = 300);

// Training: a random small MLP (depth, widths, activations, layer_norm, bias,
// optimizer drawn from `seed`) trained for `steps` steps by two Trainers,
// "eager" and "cudagraphs"; losses and every state tensor bitwise equal.
DifferentialOutcome run_training_differential(uint64_t seed, runtime::Device device, int steps);

}  // namespace grove::fuzz
