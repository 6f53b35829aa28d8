// add_gradient_all_reduce: the backward program of data-parallel training.
// It is the single-device backward with `all_reduce` nodes (compiler/ops/
// collective_ops.cc) over its gradient outputs, so that every rank ends the
// backward holding the gradients averaged over all ranks' shards.
//
// Note [Gradient buckets]: gradients are grouped into buckets of about
// `bucket_bytes` in the order the backward produces them (last layer first),
// and each bucket's all_reduce is placed right after the node that produces
// its last gradient, not at the end: each gradient's copy into its
// `grad.<param>` buffer is moved up to right after the node that computes it
// (the buffer is read by nothing else, so only the position changes), and the
// bucket's all_reduce follows the last of those copies. So the collective of
// an early bucket is enqueued while the rest of the backward is still to
// come, one collective moves several gradients (fewer, larger messages), and
// the whole thing is one program, so the "cudagraphs" backend captures the
// collectives inside the backward's graph. Every rank builds the same program
// from the same model, so the buckets and their order agree across ranks.
//
// Note [Last gradient bucket]: the last bucket's all_reduce can overlap
// nothing (the backward's last node produced its last gradient), so all of
// it is exposed in the step. With `last_bucket_bytes` set, the gradients
// produced last (at least that many bytes, counted back from the end) form a
// bucket of their own and the others are bucketed by `bucket_bytes` as
// before, so the exposed collective is small and its earlier neighbour runs
// while the last layer's gradients are still being computed. Off by default:
// on 2xH200 (session 22, 4 MiB buckets) a 1 MiB last bucket gained nothing
// on mlp16x512 (the collectives queue behind each other, so the exposed time
// is the backlog, not the last bucket) and was within noise on gpt4x256.
// Tested by GradientAllReduce.LastBucketHoldsTheGradientsProducedLast.
//
// Note [First gradient bucket]: no collective starts before the first bucket
// is complete, and from then on the communication stream has the rest of the
// backward to hide every later bucket in. When the collectives take about as
// long as that rest (mlp16x512 on two GPUs), the time the first bucket takes
// to fill shows up at the end of the step, so `first_bucket_bytes` closes the
// first bucket early (PyTorch DDP's first bucket, 1 MiB, is the same idea).
// Off by default: on 2xH200 (session 22) a 1 MiB first bucket saved 5-9 us of
// 435 on mlp16x512 but cost 18-35 us of 1285 on gpt4x256 (one more
// collective on a stream that is not the bottleneck there).
// Tested by GradientAllReduce.FirstBucketClosesAtItsOwnSize.
//
// Note [Small last bucket]: bucketing by size can leave a last bucket of a
// few bytes (mlp16x512's first bias, 2 KiB, after four 1 MiB weights that
// filled the bucket before it). Its collective is enqueued after the previous
// bucket's on the communication stream and nothing runs after it, so the
// step ends with one more collective's fixed latency for almost no data. With
// `min_last_bucket_bytes` set, a last bucket smaller than that joins the one
// before it, whose all_reduce then goes after the last gradient's producer
// (a few nodes later). The data-parallel trainer sets 64 KiB
// (data_parallel_all_reduce()): on 2xH200 (session 23, same process) the
// 2 KiB bucket's collective cost mlp16x512 b32 11-15 us per step overlapped
// (428.5 -> 417.2, 430 -> 414.5) and 13 us in line. The door keeps 0.
// Tested by GradientAllReduce.SmallLastBucketJoinsThePreviousOne.
//
// Note [Last buckets reduced in the optimizer step]: the collectives of the
// last buckets cannot overlap the backward (it is over), and after the
// backward's join comes the optimizer step, whose per-param updates (one
// kernel each) need only their own gradient. With `deferred_last_buckets` =
// N (overlap on), the backward reduces all but its last N buckets, and the
// optimizer step starts by forking their all_reduce onto the communication
// stream, runs the updates of the params already reduced meanwhile, joins,
// then updates the rest (add_deferred_all_reduce, deferred_all_reduce.h).
// Same collectives on the same buffers and the same update kernels, so the
// params are bitwise those of the plain plan. The buckets keep their plan
// (GradientBuckets::deferred counts the last ones left out of the backward).
// Off by default: on 2xH200 (session 23 r2, same process) it lost on
// mlp16x512 b32 (2 GPUs: 432.6/435.1/442.6 us with the last bucket deferred,
// 462 with two, against 414.2/414.9) and on gpt4x256: the last bucket's
// collective now waits for the backward's graph to end and the optimizer's
// to start, while the updates it could hide behind are short.
// Tested by GradientAllReduce.DeferredBucketsAreLeftOutOfTheBackward and
// DataParallel.DeferredBucketsReduceInTheOptimizerStepAndTrainAlikeBitwise.
//
// Overlap (the default): each all_reduce runs on the communication stream,
// forked from the compute stream when its bucket is complete, and the
// backward ends with a collective_join that makes the compute stream wait for
// the last one (Note [Communication stream] in
// runtime/collectives/communication_stream.h), so communication overlaps the
// rest of the backward, eagerly and inside a captured graph (a parallel
// branch). The kernels and collectives are the same either way, so results
// are bitwise identical with overlap on or off.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::distributed {

struct AllReduceOptions {
  // A bucket closes once it holds at least this many bytes (PyTorch DDP's default: 25 MiB).
  int64_t bucket_bytes = int64_t{25} << 20;
  // The gradients produced last, at least this many bytes, form the last
  // bucket (Note [Last gradient bucket]); 0: no such split.
  int64_t last_bucket_bytes = 0;
  // The first bucket closes once it holds this many bytes (Note [First
  // gradient bucket]); 0: at bucket_bytes like the others.
  int64_t first_bucket_bytes = 0;
  // A last bucket smaller than this joins the bucket before it (Note [Small
  // last bucket]); 0: never.
  int64_t min_last_bucket_bytes = 0;
  // The last this many buckets are reduced by the optimizer step instead of
  // the backward (Note [Last buckets reduced in the optimizer step]); 0: none.
  // Needs overlap; fewer when the plan has fewer buckets (at least one stays).
  int deferred_last_buckets = 0;
  std::string reduce_op = "mean";  // "mean" (data parallel) or "sum"
  // Run the all-reduces on the communication stream, overlapping the rest of
  // the backward; false runs them on the compute stream, in line.
  bool overlap = true;
  // Reduce a bucket's gradients that lie back to back in memory as one buffer
  // (Note [Adjacent buffers reduce as one] in runtime/collectives/
  // communicator.h). Only for gradient buffers laid out alike on every rank
  // (the data-parallel trainer's, Note [Gradient bucket in one buffer]).
  bool coalesce_adjacent = false;
  // The output positions to reduce (the door's backward also returns
  // gradients of inputs that are not parameters); unset: every output.
  std::optional<std::set<size_t>> outputs;
};

struct GradientBuckets {
  // Per bucket: the backward output positions it reduces, in production order.
  std::vector<std::vector<size_t>> outputs;
  std::vector<int64_t> bytes;  // per bucket
  // Per bucket: how many nodes of the input backward remain to run after its
  // all_reduce is enqueued (what it can overlap with).
  std::vector<int64_t> nodes_after;
  // How many of the last buckets the backward leaves unreduced (Note [Last
  // buckets reduced in the optimizer step]).
  size_t deferred = 0;
};

// The backward with its gradient outputs all-reduced (same inputs, outputs in
// the same order, each now the reduced gradient aliasing the same buffer).
// Outputs that are program inputs (params the loss ignores: zero gradients)
// are left alone. Throws grove::Error when an option is out of range, and
// ConfigError when `overlap` is on and a gradient does not live in a
// persistent buffer (a copy_into a `buffer` input, read by nothing else).
compiler::ir::Program add_gradient_all_reduce(const compiler::ir::Program& backward,
                                              const AllReduceOptions& options,
                                              GradientBuckets* buckets = nullptr);

}  // namespace grove::distributed
