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
//   - the kernel parameters fit in 4000 bytes (cuda's limit is 4 KiB); an
//     input every member reads through the same slot (the hyper-parameters)
//     is passed once, and an output every member writes in place through one
//     of its inputs costs no pointer (Note [Multi-part kernel arguments] in
//     compiler/codegen/kernel_spec.h), so ~160 SGD or ~120 AdamW updates fit.
// The merged kernel runs where the first one ran and allocates what all of
// them allocated; each part computes exactly what its kernel computed, so
// results are bitwise unchanged, and so is every slot's layout (mutation and
// aliasing metadata follow the same output slots).
// Tests: HorizontalFusionOnDevice.* (tests/compiler/lowering/
// horizontal_fusion_test.cc: bitwise equal to one kernel per step, eager ==
// cudagraphs, the run limit) and TrainingLowering.* (one optimizer launch).
#pragma once

#include "compiler/lowering/scheduler.h"

namespace grove::compiler::lowering {

// GROVE_HORIZONTAL_FUSION: "1" or unset merges (the default), "0" keeps one
// kernel per step (A/B timing); anything else throws ConfigError.
bool horizontal_fusion_enabled();

// Rewrites `program.steps` (before segments and releases are computed);
// compiles the merged kernels when `load_kernels`. Does nothing when
// !horizontal_fusion_enabled().
void merge_sibling_kernels(ScheduledProgram& program, bool load_kernels);

}  // namespace grove::compiler::lowering
