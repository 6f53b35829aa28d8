// HostRows is a small host-memory tensor whose dim 0 counts rows: what a
// request brings to the server (one per model input) and what its response
// carries back (one per model output). Host memory because that is where a
// server's requests come from and its answers go (a socket, a queue); pinned
// host memory (RowBytes) because the worker copies a request's rows from
// where they were decoded straight to the device (Note [Request bytes copied
// once], serving/request_bytes.h).
//
//   HostRows x = HostRows::from_values<float>({1, 2, 3, 4, 5, 6}, {2, 3});  // 2 rows of 3
//   std::vector<float> values = x.values<float>();
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "serving/request_bytes.h"

namespace grove::serving {

// Note [Row bytes copied whole]
// A copy of HostRows copies its bytes with one memcpy (assign_row_bytes,
// Note [Row bytes copied in one call]): RowBytes' own copy constructor
// copies a byte at a time, and `serve` submits a copy of each request from
// its pool (Server::submit takes the Request by value), which spent about
// 1.5% of the submitting thread on it (sim, session 18). Moves stay moves.
// Test: HostRows.CopiesHoldTheSameBytesInTheirOwnPinnedBlock.
struct HostRows {
  runtime::Shape shape;  // [rows, per-row dims...]
  runtime::DType dtype = runtime::DType::kF32;
  RowBytes bytes;  // contiguous, shape_numel(shape) * dtype_size(dtype)

  HostRows() = default;
  HostRows(runtime::Shape shape, runtime::DType dtype, RowBytes bytes)
      : shape(std::move(shape)), dtype(dtype), bytes(std::move(bytes)) {}
  HostRows(const HostRows& other) : shape(other.shape), dtype(other.dtype) {
    assign_row_bytes(bytes, other.bytes.data(), other.bytes.size());
  }
  HostRows& operator=(const HostRows& other) {
    if (this != &other) {
      shape = other.shape;
      dtype = other.dtype;
      assign_row_bytes(bytes, other.bytes.data(), other.bytes.size());
    }
    return *this;
  }
  HostRows(HostRows&&) noexcept = default;
  HostRows& operator=(HostRows&&) noexcept = default;
  ~HostRows() = default;

  int64_t rows() const { return shape.empty() ? 0 : shape.front(); }
  // The dims after the first ("[512]" for rows of 512 values).
  runtime::Shape row_shape() const;
  size_t row_bytes() const;
  std::string str() const;  // "f32[2, 3]"

  // Throws ShapeError when `values` do not fill `shape` or the shape has no
  // row dimension.
  template <typename T>
  static HostRows from_values(const std::vector<T>& values, const runtime::Shape& shape);
  // The elements as T; throws DTypeError when T does not match the dtype.
  template <typename T>
  std::vector<T> values() const;
};

runtime::DType dtype_of_element(const char* what, size_t size, bool floating, bool is_signed);

template <typename T>
HostRows HostRows::from_values(const std::vector<T>& values, const runtime::Shape& shape) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                "HostRows::from_values: use float, double, int32_t or int64_t");
  GROVE_CHECK_AS(ShapeError, !shape.empty(), "HostRows::from_values: shape ",
                 runtime::shape_str(shape), " has no row dimension; give [rows, ...]");
  GROVE_CHECK_AS(ShapeError, static_cast<int64_t>(values.size()) == runtime::shape_numel(shape),
                 "HostRows::from_values: ", values.size(), " values do not fill shape ",
                 runtime::shape_str(shape));
  HostRows rows;
  rows.shape = shape;
  rows.dtype = dtype_of_element("HostRows::from_values", sizeof(T), std::is_floating_point_v<T>,
                                std::is_signed_v<T>);
  rows.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(rows.bytes.data(), values.data(), rows.bytes.size());
  return rows;
}

template <typename T>
std::vector<T> HostRows::values() const {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                "HostRows::values: use float, double, int32_t or int64_t");
  runtime::DType expected = dtype_of_element("HostRows::values", sizeof(T),
                                             std::is_floating_point_v<T>, std::is_signed_v<T>);
  GROVE_CHECK_AS(DTypeError, expected == dtype, "HostRows::values<", runtime::dtype_name(expected),
                 "> of ", str(), "; read it with the element type of its dtype");
  std::vector<T> result(bytes.size() / sizeof(T));
  if (!result.empty()) std::memcpy(result.data(), bytes.data(), result.size() * sizeof(T));
  return result;
}

}  // namespace grove::serving
