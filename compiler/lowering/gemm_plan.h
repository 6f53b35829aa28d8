// How a GEMM node (matmul, batched matmul, linear) runs as library GEMMs: the
// row-major arguments, one call or a strided batch (plus loops over batch
// dims that cannot be merged), and which operands need a contiguous copy
// first because no leading dimension describes them.
#pragma once

#include <functional>
#include <vector>

#include "compiler/lowering/lowering_graph.h"
#include "compiler/lowering/steps.h"

namespace grove::compiler::lowering {

// The launch of `node` (a kGemm node) over the static layouts in `slots`.
// `contiguous_copy(slot)` schedules a contiguous copy of a slot (it may add to
// `slots`) and returns the copy's slot. Throws DTypeError / ShapeError naming
// the node for operands GEMMs cannot take.
GemmLaunch plan_gemm(const LoweringGraph& graph, const LoweringNode& node,
                     std::vector<SlotInfo>& slots, const std::function<int(int)>& contiguous_copy);

}  // namespace grove::compiler::lowering
