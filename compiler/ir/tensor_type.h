// TensorType is the static type of an IR value: a concrete shape, a dtype and
// the device the value lives on. Shapes are concrete once a model is
// instantiated (named dimensions such as "batch" are bound at load time); the
// one exception is a dimension produced by an op that needs a host sync
// (`nonzero`), which is kDynamicDim until the op has run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace grove::compiler::ir {

using runtime::Device;
using runtime::DType;
using runtime::Shape;

// A dimension whose size is only known after a host sync (see `nonzero`).
inline constexpr int64_t kDynamicDim = -1;
// Largest element count a value may have (the model format rejects more).
inline constexpr int64_t kMaxElements = int64_t{1} << 31;

struct TensorType {
  Shape shape;
  DType dtype = DType::kF32;
  Device device = runtime::kCpuDevice;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  // Element count; kDynamicDim when any dimension is dynamic.
  int64_t numel() const;
  bool is_scalar() const { return shape.empty(); }
  bool has_dynamic_dims() const;

  friend bool operator==(const TensorType&, const TensorType&) = default;
  std::string str() const;  // "f32[2, 3]@sim:0"
};

// "[2, 3]", with "?" for dynamic dimensions.
std::string shape_text(const Shape& shape);

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

}  // namespace grove::compiler::ir
