// A program's implicit random generator: dropout (and any later random op)
// may draw from the device's Philox generator (runtime/philox_generator.h)
// instead of taking explicit seed and offset operands.
//
// Note [Implicit generator]
// Such a program holds two i64 scalar buffers, kGeneratorSeed and
// kGeneratorOffset. Its k-th implicit random op reads the seed buffer and the
// computed value offset + base_k, where base_k is the number of draws made by
// the earlier implicit ops of the program (a `full` constant and an `add`), so
// one call uses generator_draws() consecutive Philox counters. Before each call
// compile()'s CompiledModel reserves that many counters from the device's
// generator and stores its seed and first counter into the two buffers with a
// kernel on the current stream (outside any graph): a graph reads them at each
// replay, so replays draw fresh numbers, eager and cudagraphs draw the same
// numbers for the same generator state, and a seed set between calls takes
// effect. A backward program reads the forward's computed offsets as saved
// activations, never recomputing them from the offset buffer (Note [Generator
// state is read once], compiler/autodiff/training_programs.cc), so its masks
// are the forward's even when several forwards ran before it, and it draws
// nothing: one training step advances the generator by the forward's draws.
// It reads the seed buffer itself, which only a drawing call rewrites, so a
// manual_seed between a forward and its backward does not reach the backward
// (unless another forward drew in between). Tests: ImplicitGenerator.* and
// ImplicitGeneratorState.* (tests/cudagraph_trees/backend/
// implicit_generator_test.cc), DropoutTraining.* (tests/training/
// dropout_training_test.cc), SimGradientCheck.* (tests/compiler/autodiff/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/ir/program.h"

namespace grove::compiler::ir {

inline constexpr const char* kGeneratorSeed = "grove.generator.seed";
inline constexpr const char* kGeneratorOffset = "grove.generator.offset";

struct GeneratorState {
  ValueId seed = -1;
  ValueId offset = -1;
};

// The program's generator buffers, or nullopt when it has none.
std::optional<GeneratorState> find_generator_state(const Program& program);
// dropout(x) with probability p drawing from the implicit generator; adds the
// generator buffers on first use. Node `name` is the dropout; its offset is
// node "<name>.offset". Returns the dropout's result.
ValueId add_generator_dropout(Program& program, ValueId x, double p, const std::string& name);
// Philox counters one call of `program` draws from the generator: the
// elements of every random op whose seed operand is the seed buffer and whose
// offset operand is computed from the offset buffer in this program (a
// backward's dropouts reuse saved offsets and draw nothing new).
int64_t generator_draws(const Program& program);

}  // namespace grove::compiler::ir
