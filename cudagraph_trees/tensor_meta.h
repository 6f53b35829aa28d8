// TensorMeta is what a recording assumes about one input besides its data:
// device, dtype, shape and strides. A copied input must match it exactly on
// replay (its placeholder has that layout); a list of them is the signature a
// function was warmed up with.
#pragma once

#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace grove::cudagraph_trees {

struct TensorMeta {
  bool defined = false;
  runtime::Device device;
  runtime::DType dtype = runtime::DType::kF32;
  runtime::Shape shape;
  runtime::Shape strides;

  static TensorMeta of(const runtime::Tensor& tensor);
  // Cheap: two small vector comparisons; used on the replay path.
  bool matches(const runtime::Tensor& tensor) const {
    if (!tensor.defined()) return !defined;
    return defined && tensor.device() == device && tensor.dtype() == dtype &&
           tensor.shape() == shape && tensor.strides() == strides;
  }
  std::string str() const;
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

using InputSignature = std::vector<TensorMeta>;
InputSignature signature_of(const std::vector<runtime::Tensor>& inputs);

}  // namespace grove::cudagraph_trees
