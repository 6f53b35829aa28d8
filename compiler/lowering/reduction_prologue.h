// Reduction prologues: the elementwise group that produces a reduction's row
// operand runs inside the reduction's kernel, which writes that operand too,
// so a value that is both summed and read elsewhere (a gradient summed into a
// bias gradient and fed to the next GEMM) costs one kernel instead of two.
//
// Note [Reduction prologues]: after plan_fusion, a reduction root R (the root
// is the reduction itself, not averaging its rows) whose row operand v
// (RowLayout::kFull) is materialized by a pointwise root P takes P's group
// into its own: R's kernel evaluates v per element of its rows, reduces it,
// and writes v (FusionPlan::extra_outputs[R]); P launches nothing. Only when
//   - P's group holds no reduction, P is not an in-place update and has one
//     result, v is not dynamic and has R's row-operand shape (so every element
//     of v is computed exactly once, by the thread that reduces it);
//   - the merged kernel launches at P's place in program order
//     (FusionPlan::launches_here), so every other reader of v, before or
//     after R, finds it written: everything else R's group reads must be
//     computed before P, and no in-place or host node may lie between P and R
//     (the inputs keep the values they had at P). R's result is then written
//     early, which its readers (all after R) cannot tell;
//   - the two groups together stay within Note [Fused expression depth].
// The same holds for a group rooted at an element-wise consumer of its
// reduction's per-row value (Note [Per-row values broadcast in their
// reduction's kernel], fusion.cc: rms_norm written out) when v is the one
// materialized pointwise value the group reads, read only per element of
// its rows (LLaMA's pre-norm residual add). v is computed by the same
// expressions as in P's own kernel, so its bits are unchanged, and the
// reduction's summation order is unchanged. Column
// reductions (the reduced dims come before the innermost dim of the operand)
// reduce one row per thread on cuda (Note [Thread-per-row reductions] in
// compiler/codegen/kernel_spec.h). By default only row reductions (over the
// operand's last dim alone: layer_norm after a pre-norm residual add, which
// then costs no kernel of its own) take prologues, and no reduction runs a row
// per thread: on an H100 the column sums of training steps got slower with
// them (gpt4x256 b=8 T=32: 2087 us against 1871 us). GROVE_FUSE_REDUCTION_PROLOGUES=1
// turns both on for every reduction, 0 off. Tests:
// tests/compiler/lowering/reduction_prologue_test.cc (ReductionPrologueCounts.
// RowReductionsTakeProloguesByDefault).
#pragma once

#include "compiler/codegen/kernel_spec.h"
#include "compiler/lowering/fusion.h"
#include "compiler/lowering/lowering_graph.h"

namespace grove::compiler::lowering {

// GROVE_FUSE_REDUCTION_PROLOGUES: "1" every reduction (and thread-per-row
// column reductions), "0" none; unset or empty: row reductions only (Note
// [Reduction prologues]); anything else is a ConfigError.
enum class ReductionPrologues { kNone, kRowReductions, kAll };
ReductionPrologues reduction_prologues_mode();

// Rewrites `plan` (Note [Reduction prologues]); sizes extra_outputs and
// written_by even when disabled.
void fuse_reduction_prologues(const LoweringGraph& graph, FusionPlan& plan);

// Whether the reduction kernel of `reduction` (iterating `spec`) should reduce
// one row per thread on cuda: a column reduction with enough rows.
bool use_thread_rows(const LoweringGraph& graph, const LoweringNode& reduction,
                     const codegen::KernelSpec& spec);

}  // namespace grove::compiler::lowering
