#include "cudagraph_trees/input_classification.h"

namespace grove::cudagraph_trees {
namespace {

// The byte range [low, low + bytes) relative to element 0 that a strided view reaches.
void strided_span(const runtime::Tensor& tensor, int64_t& low_bytes, size_t& bytes) {
  low_bytes = 0;
  bytes = 0;
  if (tensor.numel() == 0) return;
  int64_t low = 0, high = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    int64_t reach = (tensor.shape()[d] - 1) * tensor.strides()[d];
    (reach < 0 ? low : high) += reach;
  }
  auto element = static_cast<int64_t>(runtime::dtype_size(tensor.dtype()));
  low_bytes = low * element;
  bytes = static_cast<size_t>((high - low + 1) * element);
}

}  // namespace

const char* input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kStatic:
      return "static";
    case InputKind::kManaged:
      return "managed";
    case InputKind::kCopied:
      return "copied";
  }
  return "?";
}

const char* invariant_status_text(InvariantStatus status) {
  switch (status) {
    case InvariantStatus::kOk:
      return "ok";
    case InvariantStatus::kInputCountChanged:
      return "number of inputs changed";
    case InvariantStatus::kManagedInputMoved:
      return "pool-managed input address changed";
    case InvariantStatus::kExpectedDeadOutputAlive:
      return "an output that was dead at recording is alive";
    case InvariantStatus::kStaticInputMoved:
      return "static input address changed";
    case InvariantStatus::kCopiedInputChanged:
      return "input shape, strides, dtype or device changed";
    case InvariantStatus::kCheckedInputLayoutChanged:
      return "static or pool-managed input has a new shape, strides or dtype at the same address";
    case InvariantStatus::kMutatedInputAliased:
      return "a mutated input shares memory with another input or the tree's pool";
  }
  return "?";
}

ClassifiedInputs classify_inputs(const ClassificationRequest& request, TensorList& bound_inputs) {
  ClassifiedInputs classified;
  const TensorList& inputs = request.inputs;
  classified.kinds.resize(inputs.size());
  bound_inputs.reserve(bound_inputs.size() + inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::Tensor& input = inputs[i];
    auto index = static_cast<uint32_t>(i);
    bool written = request.function.mutated_input(i);
    if (written) classified.written.push_back(index);
    bool pool_output = input.defined() && input.storage()->address() != nullptr &&
                       request.path_output_addresses.count(input.storage()->address()) > 0;
    if (request.function.static_input(i)) {
      GROVE_CHECK(input.defined(), request.function.describe(), ": static input ", i,
                  " is undefined; static inputs must be tensors with a fixed address");
      classified.kinds[i] = InputKind::kStatic;
      classified.statics.push_back(CheckedInput::of(index, input));
      if (written) classified.written_fixed.push_back(index);
      bound_inputs.push_back(input);
    } else if (pool_output && request.demoted.count(i) == 0) {
      classified.kinds[i] = InputKind::kManaged;
      classified.managed.push_back(CheckedInput::of(index, input));
      if (written) classified.written_fixed.push_back(index);
      bound_inputs.push_back(input);
    } else {
      classified.kinds[i] = InputKind::kCopied;
      CopiedInput copied;
      copied.index = index;
      copied.meta = TensorMeta::of(input);
      if (!input.defined()) {
        classified.copied.push_back(copied);
        bound_inputs.push_back(input);
        continue;
      }
      strided_span(input, copied.span_low_bytes, copied.span_bytes);
      runtime::StoragePtr storage = request.allocator.allocate(copied.span_bytes, request.stream);
      int64_t element = static_cast<int64_t>(runtime::dtype_size(input.dtype()));
      runtime::Tensor placeholder(storage, input.shape(), input.strides(),
                                  -copied.span_low_bytes / element, input.dtype());
      copied.placeholder = storage->address();
      copied.copy_back = written;
      if (copied.copy_back) {
        classified.copy_back.push_back(static_cast<uint32_t>(classified.copied.size()));
      }
      if (copied.span_bytes > 0) {
        request.allocator.platform().copy_async(copied.placeholder, copied.source_in(input),
                                                copied.span_bytes,
                                                runtime::CopyKind::kDeviceToDevice, request.stream);
      }
      classified.copied.push_back(std::move(copied));
      bound_inputs.push_back(std::move(placeholder));
    }
  }
  return classified;
}

}  // namespace grove::cudagraph_trees
