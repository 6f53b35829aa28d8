// Random programs for the differential fuzzer: a seeded walk over the op
// registry's capturable ops (elementwise math with broadcasting, reductions,
// softmax, layer_norm, matmul/linear, views, concat, embedding, in-place
// copy_into into buffers and inputs) with an optional host-sync `nonzero` in
// the middle, so that the "cudagraphs" backend splits the program into
// captured and eager segments.
//
//   compiler::ir::Program program = fuzz::generate_program(seed, runtime::kSimDevice);
//
// Every node goes through ProgramBuilder, so a combination that the registry
// rejects (a shape that does not broadcast, ...) is skipped, never emitted.
// The same seed gives the same program.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "compiler/ir/program.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace grove::fuzz {

struct GeneratorOptions {
  int min_nodes = 3;
  int max_nodes = 14;
  int max_rank = 3;
  int max_dim = 5;
  double host_sync_probability = 0.3;           // a nonzero somewhere in the middle
  double mutation_probability = 0.35;           // a copy_into into a buffer or an input
  runtime::DType dtype = runtime::DType::kF32;  // of inputs, params, buffers and constants
  // Programs to differentiate: a param from the start, no casts through f16
  // or bf16, no GEMMs in f64, and a last output loss = sum over the other
  // outputs o of sum(o * projection_o) (gradient_check.h sets no host syncs
  // and no mutations).
  bool gradients = false;
};

// i64 inputs of generated programs hold token ids in [0, kTokenRange).
inline constexpr int64_t kTokenRange = 4;

compiler::ir::Program generate_program(uint64_t seed, runtime::Device device,
                                       const GeneratorOptions& options = {});

// A copy of `program` without the outputs at positions `dropped_outputs`, with
// each node in `bypassed` replaced by its operand `bypassed[node]` (which must
// have the node's result type; uses of the result read the operand instead),
// and without nodes no output depends on. Throws grove::Error when the result
// is not a valid program (the caller skips that candidate).
compiler::ir::Program rewrite_program(const compiler::ir::Program& program,
                                      const std::set<size_t>& dropped_outputs,
                                      const std::map<int32_t, size_t>& bypassed);

}  // namespace grove::fuzz
