// Horizontal fusion: runs of independent elementwise kernels that compute the
// same expressions on different tensors (the optimizer update of every param,
// say) become one multi-part kernel (Note [Multi-part kernels] in
// compiler/codegen/kernel_spec.h), so a step of N params launches one kernel
// instead of N.
//
// Note [Merging sibling kernels]: kernel steps i < j < ... merge when
//   - each is elementwise (no reductions; no kIndex / kLoadAt / kPhilox) and
//     every buffer it reads or writes is contiguous over its iteration space
//     or one broadcast element, so each part can be addressed by its linear
//     index alone;
//   - their specs are equal up to shapes and strides (same expressions, dtypes,
//     scalars, and the same contiguous/broadcast role per buffer);
//   - only views and aliases (steps without work) lie between them;
//   - no kernel of the run reads or writes storage (a slot's root) that
//     another one writes: parts run concurrently on cuda;
//   - the kernel parameters fit in 4000 bytes (cuda's limit is 4 KiB).
// The merged kernel runs where the first one ran and allocates what all of
// them allocated; each part computes exactly what its kernel computed, so
// results are bitwise unchanged, and so is every slot's layout (mutation and
// aliasing metadata follow the same output slots).
#pragma once

#include "compiler/lowering/scheduler.h"

namespace grove::compiler::lowering {

// Rewrites `program.steps` (before segments and releases are computed);
// compiles the merged kernels when `load_kernels`.
void merge_sibling_kernels(ScheduledProgram& program, bool load_kernels);

}  // namespace grove::compiler::lowering
