// add_gradient_all_reduce: the backward program of data-parallel training.
// It is the single-device backward with `all_reduce` nodes (compiler/ops/
// collective_ops.cc) over its gradient outputs, so that every rank ends the
// backward holding the gradients averaged over all ranks' shards.
//
// Note [Gradient buckets]: gradients are grouped into buckets of about
// `bucket_bytes` in the order the backward produces them (last layer first),
// and each bucket's all_reduce is placed right after the node that produces
// its last gradient, not at the end: on cuda the collective of an early
// bucket is enqueued while the rest of the backward is still to come, one
// collective moves several gradients (fewer, larger messages), and the whole
// thing is one program, so the "cudagraphs" backend captures the collectives
// inside the backward's graph. Every rank builds the same program from the
// same model, so the buckets and their order agree across ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::distributed {

struct AllReduceOptions {
  // A bucket closes once it holds at least this many bytes (PyTorch DDP's default: 25 MiB).
  int64_t bucket_bytes = int64_t{25} << 20;
  std::string reduce_op = "mean";  // "mean" (data parallel) or "sum"
};

struct GradientBuckets {
  // Per bucket: the backward output positions it reduces, in production order.
  std::vector<std::vector<size_t>> outputs;
  std::vector<int64_t> bytes;  // per bucket
};

// The backward with its gradient outputs all-reduced (same inputs, outputs in
// the same order, each now the reduced gradient aliasing the same buffer).
// Outputs that are program inputs (params the loss ignores: zero gradients)
// are left alone. Throws grove::Error when an option is out of range.
ir::Program add_gradient_all_reduce(const ir::Program& backward, const AllReduceOptions& options,
                                    GradientBuckets* buckets = nullptr);

}  // namespace grove::compiler::distributed
