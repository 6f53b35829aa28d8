// add_deferred_all_reduce: the optimizer step of data-parallel training when
// the backward leaves its last gradient buckets unreduced (Note [Last buckets
// reduced in the optimizer step] in gradient_all_reduce.h). The step first
// forks each such bucket's all_reduce onto the communication stream, then
// runs every update that reads none of their gradients, joins, and runs the
// updates that do, so the collectives of the last buckets overlap the
// updates of the params reduced by the backward.
//
// Moving the independent updates ahead of the dependent ones is valid for the
// programs of training/optimizer.h, whose per-param updates touch only their
// own param, gradient and state (and read the shared hyper-parameters).
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "distributed/gradient_all_reduce.h"

namespace grove::distributed {

// `optimizer` with an all_reduce per entry of `buckets` (the names of
// gradient buffer inputs of `optimizer`, "grad.<param>", one list per bucket)
// before its updates, overlapped (`options.overlap`: on the communication
// stream, joined before the first update that reads one of them) or in line
// (on the compute stream, first). Same inputs and outputs. Throws ConfigError
// when a name is not a `buffer` input of `optimizer` or is listed twice.
compiler::ir::Program add_deferred_all_reduce(const compiler::ir::Program& optimizer,
                                              const std::vector<std::vector<std::string>>& buckets,
                                              const AllReduceOptions& options);

}  // namespace grove::distributed
