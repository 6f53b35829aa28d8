#include "compiler/ir/tensor_type.h"

#include <limits>
#include <sstream>

namespace grove::compiler::ir {

int64_t TensorType::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim == kDynamicDim) return kDynamicDim;
    // An overflowing product saturates, so every limit check rejects it.
    if (__builtin_mul_overflow(count, dim, &count)) return std::numeric_limits<int64_t>::max();
  }
  return count;
}

bool TensorType::has_dynamic_dims() const {
  for (int64_t dim : shape) {
    if (dim == kDynamicDim) return true;
  }
  return false;
}

std::string shape_text(const Shape& shape) {
  std::ostringstream stream;
  stream << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) stream << ", ";
    if (shape[i] == kDynamicDim) {
      stream << "?";
    } else {
      stream << shape[i];
    }
  }
  stream << "]";
  return stream.str();
}

std::string TensorType::str() const {
  return std::string(runtime::dtype_name(dtype)) + shape_text(shape) + "@" + device.str();
}

}  // namespace grove::compiler::ir
