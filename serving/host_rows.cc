#include "serving/host_rows.h"

namespace grove::serving {

runtime::Shape HostRows::row_shape() const {
  return shape.empty() ? runtime::Shape{} : runtime::Shape(shape.begin() + 1, shape.end());
}

size_t HostRows::row_bytes() const {
  return static_cast<size_t>(runtime::shape_numel(row_shape())) * runtime::dtype_size(dtype);
}

std::string HostRows::str() const {
  return std::string(runtime::dtype_name(dtype)) + runtime::shape_str(shape);
}

runtime::DType dtype_of_element(const char* what, size_t size, bool floating, bool is_signed) {
  if (floating && size == 4) return runtime::DType::kF32;
  if (floating && size == 8) return runtime::DType::kF64;
  if (!floating && is_signed && size == 4) return runtime::DType::kI32;
  if (!floating && is_signed && size == 8) return runtime::DType::kI64;
  throw DTypeError(str_cat(what, ": an element type of ", size, " bytes (",
                           floating ? "floating" : "integer",
                           ") has no grove dtype; use float, double, int32_t or int64_t"));
}

}  // namespace grove::serving
