// Tensor is a strided view of a Storage: shape, strides (in elements), an
// element offset and a dtype. Views (view, transpose, permute, slice, expand)
// share the storage and launch nothing.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/small_shape.h"
#include "runtime/storage.h"

namespace grove::runtime {

// Shapes and strides keep up to 6 extents inline, so copying a Tensor of rank
// <= 6 allocates nothing (Note [Shapes without allocation]).
using Shape = SmallShape;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;  // undefined
  Tensor(StoragePtr storage, Shape shape, Shape strides, int64_t offset, DType dtype);

  // A contiguous, uninitialized tensor from the device's caching allocator on
  // the device's current stream (routed to a private pool if the thread is).
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  // A contiguous tensor holding a copy of `host_data` (numel * dtype_size bytes).
  static Tensor from_host(const void* host_data, const Shape& shape, DType dtype, Device device);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device);
  // A 0-d tensor holding `value` stored as `dtype` (store_element, dtype.h).
  static Tensor scalar(double value, DType dtype, Device device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t dim) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const StoragePtr& storage() const { return storage_; }

  // The address of element 0; throws StaleTensorError when the storage is poisoned.
  void* data_ptr() const;
  // The same address for comparisons only; never throws.
  void* address() const;

  // Views. Each checks its arguments and throws ShapeError naming them.
  Tensor view(const Shape& shape) const;  // needs a contiguous tensor; one -1 allowed
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor expand(const Shape& shape) const;  // size-1 dims broadcast with stride 0
  Tensor unsqueeze(int64_t dim) const;

  // Copies the tensor's elements (honouring strides) to the host, synchronously
  // on the current stream.
  std::vector<uint8_t> to_host_bytes() const;
  template <typename T>
  std::vector<T> to_vector() const;
  // Elements converted to double, whatever the dtype (for tests and printing).
  std::vector<double> to_doubles() const;
  // Overwrites the tensor (which must be contiguous) from host memory.
  void copy_from_host(const void* host_data);

  std::string str() const;  // "Tensor(sim:0, f32, [2, 3])"

 private:
  int64_t normalize_dim(int64_t dim, int64_t rank, const char* what) const;

  StoragePtr storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kF32;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  DType dtype;
  if constexpr (std::is_same_v<T, float>) {
    dtype = DType::kF32;
  } else if constexpr (std::is_same_v<T, double>) {
    dtype = DType::kF64;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    dtype = DType::kI32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    dtype = DType::kI64;
  } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint8_t>) {
    dtype = DType::kBool;
  } else {
    static_assert(sizeof(T) == 0, "from_vector: unsupported element type");
  }
  GROVE_CHECK_AS(ShapeError, static_cast<int64_t>(values.size()) == shape_numel(shape),
                 "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape));
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> is packed; store one byte per element.
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_host(bytes.data(), shape, dtype, device);
  } else {
    return from_host(values.data(), shape, dtype, device);
  }
}

// Note [to_vector element types]: float, double, int32_t, int64_t and bool
// must match the dtype exactly (reading f32 as int32_t is a bug, not a cast);
// any other element type of the dtype's size reads raw bits, e.g. uint16_t
// for f16 and bf16.
template <typename T>
std::vector<T> Tensor::to_vector() const {
  constexpr bool kTyped = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                          std::is_same_v<T, bool>;
  if constexpr (kTyped) {
    DType expected = std::is_same_v<T, float>     ? DType::kF32
                     : std::is_same_v<T, double>  ? DType::kF64
                     : std::is_same_v<T, int32_t> ? DType::kI32
                     : std::is_same_v<T, int64_t> ? DType::kI64
                                                  : DType::kBool;
    GROVE_CHECK_AS(DTypeError, dtype_ == expected, "to_vector<", dtype_name(expected), "> of a ",
                   dtype_name(dtype_), " tensor; use to_doubles() to convert");
  } else {
    GROVE_CHECK_AS(DTypeError, sizeof(T) == dtype_size(dtype_), "to_vector: element size ",
                   sizeof(T), " does not match dtype ", dtype_name(dtype_));
  }
  std::vector<uint8_t> bytes = to_host_bytes();
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<bool> values(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) values[i] = bytes[i] != 0;
    return values;
  } else {
    std::vector<T> values(bytes.size() / sizeof(T));
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
}

}  // namespace grove::runtime
