// PreparedProgram is one lowered program as the cudagraphs backend runs it:
// the plan of each segment (segment_plan.h), its registrations in every tree
// manager it has run in, and the checks a call makes before its segments run.
// The callable that prepare() returns and the backend instance share it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backends/backend_registry.h"
#include "compiler/lowered_program.h"
#include "cudagraph_trees/backend/segment_plan.h"
#include "cudagraph_trees/function_registry.h"

namespace grove::cudagraph_trees {
class TreeLease;
class TreeManager;
}  // namespace grove::cudagraph_trees

namespace grove::cudagraph_trees::backend {

// Note [Pool inputs of piecewise programs]
// A call's segments must read the values its inputs had when the call began.
// An input may be a replay output that lives in the tree's pool, and a
// segment replayed before the one that reads it may overwrite that block; so
// in a piecewise inference or forward program every read-only input found in
// the tree's pool is first copied outside it, and in any such program so is
// an input that the program returns (its replay would rewrite the caller's
// output). Static inputs are never candidates; the cost is one pool lookup
// per candidate. Tests: CudagraphsBackend.
// FedBackReplayOutputReadAfterTheFirstSegmentKeepsItsValues and
// CudagraphsBackend.FedBackReplayOutputReturnedAsAnOutputKeepsItsValues.
//
// Note [Mutated pool inputs of piecewise programs]
// A mutated input of a piecewise program that lives in the tree's pool cannot
// get a private copy (the write must land in it), and an earlier segment's
// replay could overwrite it before the writing segment runs; such a call runs
// every segment eagerly. One pool lookup per mutated input. Guarded by the
// differential fuzzer (DifferentialFuzz.RandomProgramsAndCallSequencesMatch-
// EagerBitwise), which feeds replay outputs into mutated inputs.
//
// Note [Aliased mutated inputs of piecewise programs]
// When a mutated input of a piecewise program shares memory with another
// input, the other input's values depend on when the write happens, which
// only eager execution of every segment reproduces; such a call runs every
// segment eagerly. A few comparisons per mutated input. Test:
// CudagraphsBackend.PiecewiseProgramWithAMutatedInputAliasingAnotherRunsEagerly.
//
// Note [Private copies of mutated storage]
// A private copy (Note [Pool inputs of piecewise programs]) must not break
// sharing that eager code would see: when a pool input to be copied overlaps
// a mutated input, the call runs eagerly instead. Test: CudagraphsBackend.
// FedBackOutputPassedAsReturnedAndMutatedInputSeesTheWrite.
class PreparedProgram {
 public:
  // Plans every segment of `lowered` (throws NotCapturedError for a segment
  // left eager under strict mode) and the checks of its calls.
  static std::shared_ptr<PreparedProgram> prepare(
      const compiler::lowering::LoweredProgram& lowered,
      const compiler::backends::CompileOptions& options);
  PreparedProgram(compiler::lowering::LoweredProgram lowered, runtime::Device device)
      : lowered_(std::move(lowered)), device_(device) {}
  PreparedProgram(const PreparedProgram&) = delete;
  PreparedProgram& operator=(const PreparedProgram&) = delete;

  // Runs the program: captured segments in the calling thread's tree manager
  // of the device, one generation per call (Note [Training steps]).
  compiler::TensorList call(const compiler::TensorList& inputs);

  runtime::Device device() const { return device_; }
  bool any_captured() const { return any_captured_; }
  // Calls, segments left eager and why, for the backend's stats.
  compiler::backends::ProgramStats stats() const;

 private:
  struct Registration {
    std::vector<std::optional<FunctionId>> ids;
    // One callable per segment: the manager's run() for captured segments,
    // the eager call otherwise. Built once, so a call copies no std::function.
    std::vector<compiler::Callable> calls;
    // Keeps the manager's tree while this program lives (Note [Trees follow
    // their functions], tree_manager.h).
    std::shared_ptr<TreeLease> lease;
  };

  // The captured segments' callables in `manager`, registering them when the
  // manager has not seen this program. The calling thread's last answer is
  // kept in a thread_local, so a steady-state call takes no lock.
  const Registration& registration_in(TreeManager& manager);
  // Notes [Mutated pool inputs of piecewise programs] and [Aliased mutated
  // inputs of piecewise programs].
  bool mutated_input_needs_eager(const TreeManager& manager,
                                 const compiler::TensorList& inputs) const;
  // Note [Pool inputs of piecewise programs]; nullopt under Note [Private
  // copies of mutated storage].
  std::optional<compiler::TensorList> private_pool_inputs(const TreeManager& manager,
                                                          const compiler::TensorList& inputs) const;

  compiler::lowering::LoweredProgram lowered_;
  runtime::Device device_;
  std::string model_name_;
  int64_t id_ = 0;  // unique per process
  std::vector<SegmentPlan> plans_;
  std::vector<compiler::Callable> eager_calls_;  // each segment's own function
  bool any_captured_ = false;
  bool starts_step_ = false;  // a Trainer's forward (Note [Training steps])
  // An optimizer stage: Note [An optimizer step continues its training step].
  bool updates_step_ = false;
  InputChecks checks_;
  int64_t fallbacks_ = 0;  // segments left eager for a real reason
  std::atomic<int64_t> pool_mutation_fallbacks_{0};
  std::atomic<int64_t> calls_{0};

  std::mutex mutex_;
  // Note [Registrations by pool]: keyed by the manager's private pool id.
  // Pool ids are never reused on a device, so a manager created at the
  // address of a dead one (reset_tree_managers) is never mistaken for it,
  // and a call needs no check that the ids still name these functions.
  std::map<uint64_t, Registration> registrations_;
};

}  // namespace grove::cudagraph_trees::backend
