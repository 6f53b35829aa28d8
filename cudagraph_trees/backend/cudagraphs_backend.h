// The "cudagraphs" execution backend (docs/ARCHITECTURE.md, section 3): each capturable
// segment of a lowered program becomes a function of the device's tree
// manager (tree_manager_for(device)); the other segments run eagerly between
// them through LoweredProgram::run_with (piecewise). One compiled call is one
// InvocationScope, so its segments share a generation.
//
//   register_cudagraphs_backend();  // also done by a static initializer
//   CompiledModel model = compile(program, {.backend = "cudagraphs"});
//   model({x});
//   model.backend_stats().tree->counters.replays
//
// Note [Segments left eager]: a segment runs eagerly, with a reason logged
// once at info ("not captured: <reason> at <op> in <model>:<node>") and
// counted in stats, when its lowering marked it non-capturable (host sync,
// host-only op, cpu tensors, several devices), when the program's device has
// no graphs (cpu), or when it launches fewer than
// TreeConfig::min_segment_kernels kernels + GEMMs (not worth a graph; counted
// separately, not a fallback). Under TreeConfig::strict (or
// GROVE_CUDAGRAPHS_STRICT=1) prepare() throws NotCapturedError instead of
// falling back. Fallbacks decided by the tree manager at run time (capture
// failure, mutation, re-record limit) are in the tree's own counters.
#pragma once

#include <memory>
#include <string>

#include "compiler/backends/backend_registry.h"

namespace grove::cudagraph_trees::backend {

// Registers "cudagraphs" with the compiler's backend registry. Idempotent and
// thread-safe; a static initializer in this library calls it too.
void register_cudagraphs_backend();

// A new instance (what the registry's factory returns).
std::unique_ptr<compiler::backends::ExecutionBackend> make_cudagraphs_backend();

}  // namespace grove::cudagraph_trees::backend
