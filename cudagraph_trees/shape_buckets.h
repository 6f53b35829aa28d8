// BucketedFunction runs a function whose batch dimension varies through a few
// recorded graphs, one per configured batch size ("bucket", batch_buckets.h):
// a call of n rows is padded up to the smallest bucket b >= n, replays b's graph, and returns
// the first n rows of each batched output. Sizes above the largest bucket run
// eagerly (reason logged once, counted in stats()).
//
//   BucketedFunction mlp(trees, {spec, /*batched inputs*/ {0}, /*batched outputs*/ {0},
//                                /*buckets*/ {1, 2, 4, 8, 16, 32, 64}});
//   TensorList out = mlp({x, w});  // x: [n, d] for any n <= 64
//
// Note [Shape buckets]
// Assumption: the function is row-independent along dim 0 of its batched
// inputs and outputs (row i of every batched output depends only on row i of
// the batched inputs and on the other inputs). Then the padded rows (zeros)
// never influence the real rows and slicing is exact; a function that
// reduces over the batch (batch norm, a mean over rows) must not be bucketed.
// Each batched input has one staging buffer of the largest bucket's rows,
// outside the pool; bucket b's function receives the view of its first b
// rows, passed as a *static* input (fixed address), so a replay copies
// nothing but the n real rows into the buffer (one device copy) and zeroes the
// b - n padded rows (one memset). Outputs are views of the replay outputs
// (first n rows): like every replay output they are overwritten by the next
// replay of that bucket. All buckets are recorded on the first call, largest
// first, each in its own generation: the largest recording reserves the pool
// segments and every smaller one reuses them, so the pool stays at the size
// of the largest bucket's recording instead of the sum of all.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cudagraph_trees/tree_manager.h"
#include "runtime/batch_buckets.h"

namespace grove::cudagraph_trees {

struct BucketSpec {
  // The function (row-independent: Note [Shape buckets]). Its mutated inputs
  // must not be batched.
  FunctionSpec function;
  std::vector<size_t> batched_inputs;   // inputs whose dim 0 is the batch (contiguous)
  std::vector<size_t> batched_outputs;  // outputs whose dim 0 is the batch
  // Increasing batch sizes; empty: the manager's TreeConfig::batch_buckets.
  std::vector<int64_t> buckets;
};

class BucketedFunction {
 public:
  // Registers one function per bucket with `manager` ("<name>:bucket<b>").
  // Throws ConfigError without buckets, Error for a bad spec.
  BucketedFunction(TreeManager& manager, BucketSpec spec);

  // Runs the function on `inputs` (any batch size). Not inside an
  // InvocationScope on the first call: recording the buckets needs a
  // generation per bucket.
  TensorList operator()(const TensorList& inputs);

  const std::vector<int64_t>& buckets() const { return buckets_.sizes(); }
  FunctionId bucket_function(size_t bucket_index) const { return functions_[bucket_index]; }
  // {"buckets": [...], "calls_per_bucket": [...], "eager_calls": n,
  //  "padded_rows": n, "prepared": bool}
  nlohmann::json stats() const;

 private:
  int64_t batch_of(const TensorList& inputs) const;
  void prepare(const TensorList& inputs);
  TensorList run_bucket(size_t bucket_index, const TensorList& inputs, int64_t rows);

  TreeManager& manager_;
  BucketSpec spec_;
  uint64_t serial_;  // unique per helper, keys its log_once messages
  runtime::BatchBuckets buckets_;
  std::vector<FunctionId> functions_;
  std::vector<runtime::Tensor> staging_;  // per batched input: [largest bucket, ...]
  std::vector<uint64_t> calls_per_bucket_;
  uint64_t eager_calls_ = 0;
  uint64_t padded_rows_ = 0;
  bool prepared_ = false;
  TensorList bucket_inputs_;  // reused per call (no allocation once sized)
};

}  // namespace grove::cudagraph_trees
