// Sibling GEMMs as one: a program rewrite, run before lowering, that turns
// GEMMs of one shared operand into one GEMM over their concatenated other
// operands (a transformer block's q/k/v projections and their gradients).
#pragma once

#include <optional>

#include "compiler/ir/program.h"

namespace grove::compiler::lowering {

// Note [Sibling GEMMs as one]: four rewrites, each of groups of two or more:
//  - forward: linear(x, W_i, b_i) over one x (the same value, or reshapes of
//    one value to one shape) and weights and biases that are program inputs
//    becomes one linear(x, concat(W_i), concat(b_i)) whose column slices are
//    the old results;
//  - weight gradients: matmul(transpose(G_i), X) over one X becomes
//    matmul(transpose(concat(G_i, 1)), X), whose row slices are the old
//    results (contiguous);
//  - input gradient: a tree of adds (through reshapes, each value read once)
//    whose leaves are linear(G_i, transpose(W_i)) (or permute [1, 0], as
//    AOTAutograd saves it) with W_i program inputs
//    becomes linear(concat(G_i, 1), transpose(concat(W_i)));
//  - bias gradients: sum(G_i, {0}) of every G_i of one of the two gradient
//    groups above becomes one sum over their concat, sliced.
// Equal concats are made once, so the forward's weight concat and the
// gradients' concat serve the backward's two GEMMs. The results are the same
// sums in another grouping: equal to the separate GEMMs within f32 rounding,
// and eager and cudagraphs run the same rewritten program. Programs with an
// op that writes in place or has a host side effect are left alone (the
// rewrite may move a node past another). GROVE_FUSE_SIBLING_GEMMS=1 turns it
// on (off by default until measured on a GPU). Tests:
// SiblingGemms.* (tests/compiler/lowering/sibling_gemms_test.cc).
bool sibling_gemm_fusion_enabled();

// The rewritten program, or nullopt where no group was found (or the program
// is left alone as the Note says). Inputs, their order and outputs are kept.
std::optional<ir::Program> fuse_sibling_gemms(const ir::Program& program);

}  // namespace grove::compiler::lowering
