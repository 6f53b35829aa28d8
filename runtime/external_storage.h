// Tensors over memory the caller owns (a PyTorch or NumPy tensor handed in
// through the C API): grove views the memory without copying it, and tells
// the caller through a release callback when its last view is gone, so the
// caller's reference keeps the memory alive exactly as long as grove needs it.
#pragma once

#include <functional>

#include "runtime/tensor.h"

namespace grove::runtime {

// Called once, when the last grove view of the memory goes (or the storage is
// poisoned); may be empty when the caller keeps the memory alive by other means.
using ReleaseCallback = std::function<void()>;

// A storage of `nbytes` at `data` on `device` that owns nothing but the
// caller's reference. Throws grove::Error when data is null and nbytes > 0.
StoragePtr external_storage(void* data, size_t nbytes, Device device, ReleaseCallback release);

// A view of caller memory: element 0 at `data`, `strides` in elements (empty:
// contiguous). The storage spans exactly the elements the view can reach.
// Throws ShapeError for a negative size or stride, or a rank that differs
// between shape and strides.
Tensor external_tensor(void* data, const Shape& shape, const Shape& strides, DType dtype,
                       Device device, ReleaseCallback release);

}  // namespace grove::runtime
