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
// rewrite may move a node past another). GROVE_FUSE_SIBLING_GEMMS=1 turns all
// four on for every program; by default only wide forward groups are fused
// (Note [Wide sibling GEMMs of inference on cuda]). Tests:
// SiblingGemms.* (tests/compiler/lowering/sibling_gemms_test.cc).
//
// Note [Wide sibling GEMMs of inference on cuda]
// Session 23 r1 (H200, one process, torch_zoo): with every group fused, LLaMA
// b16 ran 181.8 us per call against 211.5 (GPU 162.5 against 191.3: the fused
// q/k/v and gate/up GEMMs take better cuBLAS kernels than three or two narrow
// ones, which outweighs the weights' concat), BERT b16 140.0 against 158.6; at
// b1 (24-32 rows, grove's small-M kernels) the GPU time did not move (GPT-2
// 78.1 vs 78.0 us, LLaMA 80.1 vs 79.6, BERT 52.9 vs 52.0). The weights' concat
// runs on every call (they are program inputs), so it costs twice their bytes:
// nothing for a small model, but a prefill of a 1B model's q/k/v (25 MB)
// would pay more for it than it gains. So unless the switch says otherwise
// the rewrite runs on cuda programs (a performance policy: sim and cpu keep
// their lowering) with no gradient group (inference, and the forward graph of
// training through the door; whole training steps, whose gradients would join
// too, are left as they were measured), and fuses forward groups only where x has more than
// kMaxMeasuredSmallM rows (the library's GEMMs, not the small-M kernels) and
// the concatenated weights hold at most kMaxWideSiblingWeightBytes.
// GROVE_FUSE_SIBLING_GEMMS=0 turns that off (the path before). Tests:
// SiblingGemms.WideForwardGroupsOfCudaInferenceByDefault.
enum class SiblingGemmScope { kNone, kWideInferenceForward, kAll };
inline constexpr int64_t kMaxWideSiblingWeightBytes = int64_t{8} << 20;

// The scope GROVE_FUSE_SIBLING_GEMMS asks for: unset, kWideInferenceForward;
// "1", kAll; "0", kNone; anything else is refused naming the variable.
SiblingGemmScope sibling_gemm_scope();
// Whether GROVE_FUSE_SIBLING_GEMMS=1 (every group of every program).
bool sibling_gemm_fusion_enabled();

// The rewritten program, or nullopt where no group was found (or the program
// is left alone as the Notes say). Inputs, their order and outputs are kept.
std::optional<ir::Program> fuse_sibling_gemms(const ir::Program& program,
                                              SiblingGemmScope scope = SiblingGemmScope::kAll);

}  // namespace grove::compiler::lowering
