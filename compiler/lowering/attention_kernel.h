// The kernel of the `attention` op (Note [Fused attention op] in
// compiler/ops/attention_ops.cc): scores, scale, mask, softmax and the
// product with value in one launch, where the unfused form runs a GEMM, a
// scale, a mask, a softmax and a second GEMM, each a kernel.
//
// Note [Fused attention kernel]: a reduction kernel (Note [Kernel spec
// reductions]) whose rows are (leading dims, key head, query head in its
// group, query position, feature chunk) and whose reduced dimension is the
// key position j, one warp per row (Note [Warp-per-row reductions]: lanes
// take keys). Each element computes its score s_j = scale * sum_d q[d] k_j[d]
// (four partial sums over d mod 4, then added), masks it (-inf where a bool mask is false or
// j > i when causal; an additive mask is added), then the row runs two
// passes: m = max_j s_j, and together l = sum_j exp(s_j - m) and, for each
// feature f of the row's chunk, a_f = sum_j exp(s_j - m) v_j[f]; the row
// writes a_f / l (0 where l is 0: every score -inf, PyTorch's safe
// softmax; m is taken as 0 there). A row computes attention_features_per_row
// features (at most 64: accumulators stay in registers), so a head of 64
// features may be two rows that each compute the scores. Operands are read
// through their static layouts (views of a fused QKV projection need no
// copy). Accumulation is f32; results match the unfused ops within
// rounding. Tests: AttentionKernel.* (tests/compiler/lowering/
// attention_kernel_test.cc: the float64 reference on sim, and on cuda when
// present).
#pragma once

#include <optional>
#include <vector>

#include "compiler/lowering/kernel_assembly.h"
#include "compiler/lowering/lowering_graph.h"
#include "compiler/lowering/steps.h"

namespace grove::compiler::lowering {

// The most value features one row of the kernel computes: 64 when there are
// at least kAttentionRowsForWideRows query rows (every SM busy: fewer, wider
// rows compute each score half as often; 148 registers, no spills), else 32
// (short of rows, more of them finish sooner).
constexpr int64_t kAttentionMaxFeaturesPerRow = 64;
constexpr int64_t kAttentionRowsForWideRows = 1024;

// The features each row computes for `query_rows` rows of queries (every
// leading dim, head and position) and value rows of `value_features`: the
// largest divisor of it within the limit above.
int64_t attention_features_per_row(int64_t value_features, int64_t query_rows);

// The kernel computing attention node `node` (operands query, key, value and
// maybe mask; one result) over the slots' static layouts.
AssembledKernel attention_kernel(const LoweringNode& node, const std::vector<SlotInfo>& slots);

// Note [Keys and values by position]: the kernel's lanes take keys, so a
// load of feature d reads one element of each of 32 keys: with keys laid out
// [..., Tk, D] (a projection's result) those are 32 cache lines apart, and
// such scattered loads cost the L1 one cycle per line, 32 per load (an
// estimate: 90 us for GPT-2's attention at batch 16). So key and value are
// first copied position-major (positions_major_layout: element (j, d) at
// d * Tk + j), both in one kernel when they have one shape, and the kernel's
// loads of one feature are coalesced. An operand already position-major is
// read as it is. Tests: AttentionKernel.IsOneCopyAndOneKernelPerAttention.
//
// The layout of shape [..., T, D] whose positions are contiguous for each
// feature (strides [..., D * T, 1, T]).
Layout positions_major_layout(const runtime::Shape& shape);
// Whether `layout` (of a key or value) already has contiguous positions.
bool positions_major(const Layout& layout);
// Kernels copying each slot of `sources` into the slot of `copies` at the
// same place (same shapes; copies laid out by positions_major_layout): one
// kernel for every pair of one shape, iterating features before positions
// so that the copies' writes are coalesced.
std::vector<AssembledKernel> positions_major_copies(const std::vector<SlotInfo>& slots,
                                                    const std::vector<int>& sources,
                                                    const std::vector<int>& copies);

// The layout attention node `node_index`'s result gets instead of a
// contiguous one, or nullopt (Note [Attention results with heads last]).
std::optional<Layout> attention_result_layout(const LoweringGraph& graph, int node_index);
// Note [Kernel results laid out for a transposed reshape]: a fusion root's
// result read only by one transpose or permute whose result only reshapes
// read, where those reshapes could not view it (MLP-Mixer's token mixing:
// norm(x).transpose(1, 2) flattened to rows for a GEMM, a copy kernel each),
// is written in the layout that makes the transpose contiguous (the layout of
// Note [Attention results with heads last]), so the reshapes are views and no
// copy runs. Returns that layout for value `value`, or nullopt. Test:
// Kernels.ResultsReadTransposedByAReshapeAreWrittenTransposed
// (tests/compiler/lowering/attention_kernel_test.cc).
std::optional<Layout> transposed_reshape_layout(const LoweringGraph& graph, int value);
// The same for the written-out attention's last product (a matmul node, also
// bmm's [B*H, T, D] that a reshape reads as [1, H, T, D]), when the GEMM can
// write that layout in one strided batch; else nullopt.
std::optional<Layout> matmul_result_layout(const LoweringGraph& graph, int node_index);

}  // namespace grove::compiler::lowering
