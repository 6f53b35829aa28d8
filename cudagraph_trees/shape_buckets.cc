#include "cudagraph_trees/shape_buckets.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "runtime/device_context.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {
namespace {

runtime::Tensor first_rows(const runtime::Tensor& tensor, int64_t rows) {
  runtime::Shape shape = tensor.shape();
  shape[0] = rows;
  return runtime::Tensor(tensor.storage(), shape, tensor.strides(), tensor.offset(),
                         tensor.dtype());
}

}  // namespace

namespace {
uint64_t next_bucket_serial() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}
}  // namespace

BucketedFunction::BucketedFunction(TreeManager& manager, BucketSpec spec)
    : manager_(manager),
      spec_(std::move(spec)),
      serial_(next_bucket_serial()),
      buckets_(spec_.buckets.empty() ? manager_.config().batch_buckets : spec_.buckets,
               str_cat("BucketedFunction '", spec_.function.name,
                       "': BucketSpec::buckets (or GROVE_CUDAGRAPHS_BATCH_BUCKETS)")) {
  const std::string& name = spec_.function.name;
  GROVE_CHECK(!spec_.batched_inputs.empty(), "BucketedFunction '", name,
              "': no batched inputs; name the inputs whose dim 0 is the batch");
  std::set<size_t> mutated(spec_.function.mutated_input_indices.begin(),
                           spec_.function.mutated_input_indices.end());
  std::set<size_t> seen;
  for (size_t index : spec_.batched_inputs) {
    GROVE_CHECK(seen.insert(index).second, "BucketedFunction '", name, "': batched input ", index,
                " is listed twice");
    GROVE_CHECK(mutated.count(index) == 0, "BucketedFunction '", name, "': batched input ", index,
                " is mutated; a padded copy would absorb the write. Do not bucket "
                "functions that write their batched inputs");
  }
  FunctionSpec per_bucket = spec_.function;
  for (size_t index : spec_.batched_inputs) {
    // Note [Shape buckets]: the staging views have fixed addresses.
    if (std::find(per_bucket.static_input_indices.begin(), per_bucket.static_input_indices.end(),
                  index) == per_bucket.static_input_indices.end()) {
      per_bucket.static_input_indices.push_back(index);
    }
  }
  for (int64_t rows : buckets_.sizes()) {
    FunctionSpec bucket = per_bucket;
    bucket.name = str_cat(name, ":bucket", rows);
    functions_.push_back(manager_.register_function(std::move(bucket)));
  }
  calls_per_bucket_.assign(buckets_.count(), 0);
}

int64_t BucketedFunction::batch_of(const TensorList& inputs) const {
  int64_t batch = -1;
  for (size_t index : spec_.batched_inputs) {
    GROVE_CHECK(index < inputs.size(), "BucketedFunction '", spec_.function.name,
                "': batched input ", index, " but the call has ", inputs.size(), " inputs");
    const runtime::Tensor& input = inputs[index];
    GROVE_CHECK_AS(ShapeError, input.defined() && input.dim() >= 1 && input.is_contiguous(),
                   "BucketedFunction '", spec_.function.name, "': batched input ", index,
                   " must be a contiguous tensor with a batch dimension, found ",
                   input.defined() ? input.str() : "undefined", "; make it contiguous first");
    GROVE_CHECK_AS(ShapeError, batch < 0 || input.shape()[0] == batch, "BucketedFunction '",
                   spec_.function.name, "': batched inputs disagree on the batch size (", batch,
                   " vs ", input.shape()[0], " at input ", index, ")");
    batch = input.shape()[0];
  }
  return batch;
}

TensorList BucketedFunction::operator()(const TensorList& inputs) {
  int64_t rows = batch_of(inputs);
  std::optional<size_t> bucket = buckets_.index_for(rows);
  if (!bucket) {
    std::string reason = str_cat("batch size ", rows, " is above the largest bucket (",
                                 buckets_.largest(), "); add a larger bucket to capture it");
    GROVE_CHECK_AS(NotCapturedError, !manager_.config().strict, "function '", spec_.function.name,
                   "' was not captured: ", reason, " (strict mode, GROVE_CUDAGRAPHS_STRICT=1)");
    log_once(LogLevel::kInfo, str_cat("cudagraph_trees:bucket:", serial_, ":", rows),
             str_cat("not captured: '", spec_.function.name, "' runs eagerly: ", reason));
    ++eager_calls_;
    return spec_.function.body(inputs);
  }
  if (!prepared_) prepare(inputs);
  return run_bucket(*bucket, inputs, rows);
}

void BucketedFunction::prepare(const TensorList& inputs) {
  // Staging buffers, zeroed, with the first call's rows (contents do not matter
  // for recording; Note [Shape buckets]).
  const int64_t largest = buckets_.largest();
  for (size_t index : spec_.batched_inputs) {
    const runtime::Tensor& input = inputs[index];
    runtime::Shape shape = input.shape();
    shape[0] = largest;
    staging_.push_back(runtime::Tensor::empty(shape, input.dtype(), input.device()));
  }
  // Largest first, each bucket warmed up and recorded in its own generations.
  uint64_t padded_before = padded_rows_;
  for (size_t b = buckets_.count(); b-- > 0;) {
    for (int pass = 0; pass < 2; ++pass) {
      TensorList outputs = run_bucket(b, inputs, std::min(batch_of(inputs), buckets_.sizes()[b]));
      --calls_per_bucket_[b];
    }
  }
  padded_rows_ = padded_before;
  prepared_ = true;
}

TensorList BucketedFunction::run_bucket(size_t bucket_index, const TensorList& inputs,
                                        int64_t rows) {
  const int64_t bucket_rows = buckets_.sizes()[bucket_index];
  runtime::DeviceContext& context = runtime::device_context(manager_.device());
  runtime::StreamHandle stream = context.current_stream();
  bucket_inputs_.assign(inputs.begin(), inputs.end());
  for (size_t k = 0; k < spec_.batched_inputs.size(); ++k) {
    const runtime::Tensor& input = inputs[spec_.batched_inputs[k]];
    const runtime::Tensor& staging = staging_[k];
    GROVE_CHECK_AS(ShapeError,
                   input.dtype() == staging.dtype() && input.device() == staging.device() &&
                       std::equal(input.shape().begin() + 1, input.shape().end(),
                                  staging.shape().begin() + 1, staging.shape().end()),
                   "BucketedFunction '", spec_.function.name, "': batched input ",
                   spec_.batched_inputs[k], " is ", input.str(), "; the buckets were made for ",
                   staging.str(), " (only dim 0 may vary)");
    size_t row_bytes = staging.nbytes() / static_cast<size_t>(buckets_.largest());
    auto* base = static_cast<char*>(staging.data_ptr());
    runtime::BucketPadding padding = runtime::bucket_padding(rows, bucket_rows, row_bytes);
    if (padding.real_bytes > 0) {
      context.platform().copy_async(base, input.data_ptr(), padding.real_bytes,
                                    runtime::CopyKind::kDeviceToDevice, stream);
    }
    if (padding.padding_bytes > 0) {
      context.platform().memset_async(base + padding.real_bytes, 0, padding.padding_bytes, stream);
    }
    bucket_inputs_[spec_.batched_inputs[k]] = first_rows(staging, bucket_rows);
  }
  padded_rows_ += static_cast<uint64_t>(runtime::bucket_padding(rows, bucket_rows, 0).padded_rows);
  ++calls_per_bucket_[bucket_index];
  TensorList outputs = manager_.run(functions_[bucket_index], bucket_inputs_);
  for (size_t index : spec_.batched_outputs) {
    GROVE_CHECK_AS(ShapeError,
                   index < outputs.size() && outputs[index].defined() &&
                       outputs[index].dim() >= 1 && outputs[index].shape()[0] == bucket_rows,
                   "BucketedFunction '", spec_.function.name, "': batched output ", index,
                   " does not have ", bucket_rows, " rows in bucket ", bucket_rows,
                   "; list only outputs whose dim 0 is the batch");
    outputs[index] = first_rows(outputs[index], rows);
  }
  return outputs;
}

nlohmann::json BucketedFunction::stats() const {
  return nlohmann::json{{"buckets", buckets_.sizes()},
                        {"calls_per_bucket", calls_per_bucket_},
                        {"eager_calls", eager_calls_},
                        {"padded_rows", padded_rows_},
                        {"prepared", prepared_}};
}

}  // namespace grove::cudagraph_trees
