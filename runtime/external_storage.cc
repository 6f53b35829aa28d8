#include "runtime/external_storage.h"

#include <utility>

namespace grove::runtime {
namespace {

class CallerReference final : public MemoryOwner {
 public:
  explicit CallerReference(ReleaseCallback release) : release_(std::move(release)) {}
  ~CallerReference() override {
    if (release_) release_();
  }

 private:
  ReleaseCallback release_;
};

}  // namespace

StoragePtr external_storage(void* data, size_t nbytes, Device device, ReleaseCallback release) {
  // Owning the callback first means a failed check below still releases the
  // caller's reference, so the caller never has to guess whether it must.
  auto owner = std::make_unique<CallerReference>(std::move(release));
  GROVE_CHECK(data != nullptr || nbytes == 0, "external storage on ", device.str(), ": ", nbytes,
              " bytes at a null address; pass the tensor's data pointer");
  return std::make_shared<Storage>(data, nbytes, device, std::move(owner));
}

Tensor external_tensor(void* data, const Shape& shape, const Shape& strides, DType dtype,
                       Device device, ReleaseCallback release) {
  // Borrowed memory (no callback) needs no owner at all: one allocation less
  // on the C API's per-call path.
  std::unique_ptr<CallerReference> owner;
  if (release) owner = std::make_unique<CallerReference>(std::move(release));
  Shape actual_strides = strides.empty() ? contiguous_strides(shape) : strides;
  GROVE_CHECK_AS(ShapeError, actual_strides.size() == shape.size(), "external tensor: shape ",
                 shape_str(shape), " has rank ", shape.size(), " but strides ", shape_str(strides),
                 " have ", strides.size(), " entries");
  int64_t last = 0;  // the furthest element a view can reach
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    GROVE_CHECK_AS(ShapeError, shape[d] >= 0, "external tensor: shape ", shape_str(shape),
                   " has a negative size");
    GROVE_CHECK_AS(ShapeError, actual_strides[d] >= 0, "external tensor: strides ",
                   shape_str(actual_strides),
                   " have a negative entry; grove views need non-negative strides");
    if (shape[d] == 0) empty = true;
    if (shape[d] > 0) last += (shape[d] - 1) * actual_strides[d];
  }
  const size_t nbytes = empty ? 0 : static_cast<size_t>(last + 1) * dtype_size(dtype);
  GROVE_CHECK(data != nullptr || nbytes == 0, "external tensor on ", device.str(), " of shape ",
              shape_str(shape), ": null data pointer; pass the tensor's data pointer");
  auto storage = std::make_shared<Storage>(data, nbytes, device, std::move(owner));
  return Tensor(std::move(storage), shape, actual_strides, 0, dtype);
}

}  // namespace grove::runtime
