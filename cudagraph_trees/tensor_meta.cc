#include "cudagraph_trees/tensor_meta.h"

namespace grove::cudagraph_trees {

TensorMeta TensorMeta::of(const runtime::Tensor& tensor) {
  TensorMeta meta;
  meta.defined = tensor.defined();
  if (!meta.defined) return meta;
  meta.device = tensor.device();
  meta.dtype = tensor.dtype();
  meta.shape = tensor.shape();
  meta.strides = tensor.strides();
  return meta;
}

std::string TensorMeta::str() const {
  if (!defined) return "undefined";
  return str_cat(device.str(), " ", runtime::dtype_name(dtype), " ", runtime::shape_str(shape),
                 " strides ", runtime::shape_str(strides));
}

InputSignature signature_of(const std::vector<runtime::Tensor>& inputs) {
  InputSignature signature;
  signature.reserve(inputs.size());
  for (const runtime::Tensor& input : inputs) signature.push_back(TensorMeta::of(input));
  return signature;
}

}  // namespace grove::cudagraph_trees
