// The strided copy kernel: gathers a tensor of any layout (expanded with
// stride 0, transposed, sliced; rank up to kMaxStridedCopyRank) into a
// contiguous tensor of the same shape and dtype, as a kernel grove launches
// itself (PTX on cuda, a host function on sim), so it runs in stream order
// and may be captured into a graph. Compiled kernels read contiguous tensors
// only; the lowering materialises other layouts with this once per call
// (compiler/lowering/lower.cc, Note [Strided inputs]).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace grove::runtime {

inline constexpr int64_t kMaxStridedCopyRank = 8;

// Writes `source`'s elements, in row-major order, into `destination`
// (contiguous, same shape, dtype and device) on the device's current stream.
// Throws ShapeError naming both layouts when they disagree or the rank is
// above kMaxStridedCopyRank.
void copy_to_contiguous(const Tensor& source, const Tensor& destination);
// A new contiguous tensor (from the caching allocator, the thread's pool
// routing applies) holding `source`'s elements.
Tensor contiguous_copy(const Tensor& source);

// The PTX the cuda device loads (for checks that assemble it).
const char* strided_copy_ptx();

}  // namespace grove::runtime
