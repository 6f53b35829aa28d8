#include "runtime/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::runtime {

int64_t shape_numel(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    GROVE_CHECK_AS(ShapeError, !__builtin_mul_overflow(count, extent, &count), "shape ",
                   shape_str(shape), " has more elements than a 64-bit count holds");
  }
  return count;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream stream;
  stream << "[";
  for (size_t i = 0; i < shape.size(); ++i) stream << (i ? ", " : "") << shape[i];
  stream << "]";
  return stream.str();
}

Tensor::Tensor(StoragePtr storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  GROVE_CHECK_AS(ShapeError, shape_.size() == strides_.size(), "tensor with shape ",
                 shape_str(shape_), " and strides ", shape_str(strides_), ": ranks differ");
  for (int64_t extent : shape_) {
    GROVE_CHECK_AS(ShapeError, extent >= 0, "tensor shape ", shape_str(shape_),
                   " has a negative extent");
  }
  if (storage_ == nullptr || shape_numel(shape_) == 0) return;
  // Every element the view can reach must lie inside the storage.
  int64_t low = offset_, high = offset_;
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t reach = (shape_[i] - 1) * strides_[i];
    (reach < 0 ? low : high) += reach;
  }
  auto element = static_cast<int64_t>(dtype_size(dtype_));
  GROVE_CHECK_AS(ShapeError,
                 low >= 0 && (high + 1) * element <= static_cast<int64_t>(storage_->nbytes()),
                 "tensor of shape ", shape_str(shape_), ", strides ", shape_str(strides_),
                 ", offset ", offset_, " and dtype ", dtype_name(dtype_), " reaches elements [",
                 low, ", ", high, "] outside its storage of ", storage_->nbytes(), " bytes");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t extent : shape) {
    GROVE_CHECK_AS(ShapeError, extent >= 0 && extent < (int64_t{1} << 40), "Tensor::empty: shape ",
                   shape_str(shape), " has an extent out of range");
  }
  DeviceContext& context = device_context(device);
  size_t bytes = 0;
  // [2^30, 2^31] of f64 is 2^64 bytes: the product wrapped to 0 and gave a
  // tensor of 2^61 elements backed by nothing.
  GROVE_CHECK_AS(
      ShapeError,
      !__builtin_mul_overflow(static_cast<size_t>(shape_numel(shape)), dtype_size(dtype), &bytes),
      "Tensor::empty: shape ", shape_str(shape), " of ", dtype_name(dtype),
      " has more bytes than a 64-bit size holds");
  StoragePtr storage = context.allocator().allocate(bytes, context.current_stream());
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::from_host(const void* host_data, const Shape& shape, DType dtype, Device device) {
  Tensor tensor = empty(shape, dtype, device);
  tensor.copy_from_host(host_data);
  return tensor;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  uint8_t bytes[sizeof(double)];
  store_element(bytes, dtype, value);
  return from_host(bytes, {}, dtype, device);
}

Device Tensor::device() const {
  GROVE_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

int64_t Tensor::size(int64_t dim) const {
  return shape_[static_cast<size_t>(normalize_dim(dim, this->dim(), "size"))];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element is out of place (as in PyTorch)
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  GROVE_CHECK(defined(), "data_ptr() of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void* Tensor::address() const {
  if (!defined()) return nullptr;
  return static_cast<char*>(storage_->address()) +
         offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

int64_t Tensor::normalize_dim(int64_t dim, int64_t rank, const char* what) const {
  int64_t normalized = dim < 0 ? dim + rank : dim;
  GROVE_CHECK_AS(ShapeError, normalized >= 0 && normalized < rank, what, ": dimension ", dim,
                 " is out of range for a tensor of shape ", shape_str(shape_));
  return normalized;
}

Tensor Tensor::view(const Shape& shape) const {
  GROVE_CHECK_AS(ShapeError, is_contiguous(), "view ", shape_str(shape),
                 " of a non-contiguous tensor of shape ", shape_str(shape_), " with strides ",
                 shape_str(strides_), ": make it contiguous first");
  Shape resolved = shape;
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      GROVE_CHECK_AS(ShapeError, inferred < 0, "view ", shape_str(shape), ": only one -1 allowed");
      inferred = static_cast<int64_t>(i);
    } else {
      GROVE_CHECK_AS(ShapeError, resolved[i] >= 0, "view ", shape_str(shape), ": negative extent");
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    GROVE_CHECK_AS(ShapeError, known != 0 && numel() % known == 0, "view ", shape_str(shape),
                   " cannot hold the ", numel(), " elements of shape ", shape_str(shape_));
    resolved[static_cast<size_t>(inferred)] = numel() / known;
  }
  GROVE_CHECK_AS(ShapeError, shape_numel(resolved) == numel(), "view ", shape_str(shape), " has ",
                 shape_numel(resolved), " elements but the tensor of shape ", shape_str(shape_),
                 " has ", numel());
  return Tensor(storage_, resolved, contiguous_strides(resolved), offset_, dtype_);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  int64_t a = normalize_dim(dim0, dim(), "transpose");
  int64_t b = normalize_dim(dim1, dim(), "transpose");
  Shape shape = shape_;
  Shape strides = strides_;
  std::swap(shape[static_cast<size_t>(a)], shape[static_cast<size_t>(b)]);
  std::swap(strides[static_cast<size_t>(a)], strides[static_cast<size_t>(b)]);
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  GROVE_CHECK_AS(ShapeError, static_cast<int64_t>(order.size()) == dim(), "permute of a rank-",
                 dim(), " tensor needs ", dim(), " dimensions, got ", order.size());
  Shape shape(order.size());
  Shape strides(order.size());
  std::vector<bool> used(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    auto source = static_cast<size_t>(normalize_dim(order[i], dim(), "permute"));
    GROVE_CHECK_AS(ShapeError, !used[source], "permute: dimension ", order[i], " repeats");
    used[source] = true;
    shape[i] = shape_[source];
    strides[i] = strides_[source];
  }
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::slice(int64_t dim_index, int64_t start, int64_t end) const {
  auto d = static_cast<size_t>(normalize_dim(dim_index, dim(), "slice"));
  GROVE_CHECK_AS(ShapeError, 0 <= start && start <= end && end <= shape_[d], "slice [", start, ", ",
                 end, ") of dimension ", dim_index, " with extent ", shape_[d], " is out of range");
  Shape shape = shape_;
  shape[d] = end - start;
  return Tensor(storage_, shape, strides_, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  GROVE_CHECK_AS(ShapeError, shape.size() >= shape_.size(), "expand of shape ", shape_str(shape_),
                 " to fewer dimensions ", shape_str(shape));
  size_t lead = shape.size() - shape_.size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t target = shape[lead + i];
    if (shape_[i] == target) {
      strides[lead + i] = strides_[i];
    } else {
      GROVE_CHECK_AS(ShapeError, shape_[i] == 1, "expand of shape ", shape_str(shape_), " to ",
                     shape_str(shape), ": dimension ", i, " has extent ", shape_[i],
                     ", which only broadcasts from 1");
    }
  }
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::unsqueeze(int64_t dim_index) const {
  int64_t d = dim_index < 0 ? dim_index + dim() + 1 : dim_index;
  GROVE_CHECK_AS(ShapeError, d >= 0 && d <= dim(), "unsqueeze: dimension ", dim_index,
                 " out of range for shape ", shape_str(shape_));
  Shape shape = shape_;
  Shape strides = strides_;
  int64_t stride = static_cast<size_t>(d) < shape_.size() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

std::vector<uint8_t> Tensor::to_host_bytes() const {
  GROVE_CHECK(defined(), "to_host of an undefined tensor");
  size_t element = dtype_size(dtype_);
  std::vector<uint8_t> result(static_cast<size_t>(numel()) * element);
  if (result.empty()) return result;
  // The span of storage the view touches, relative to element 0.
  int64_t low = 0, high = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t reach = (shape_[i] - 1) * strides_[i];
    (reach < 0 ? low : high) += reach;
  }
  size_t span = static_cast<size_t>(high - low + 1) * element;
  std::vector<uint8_t> staging(span);
  DeviceContext& context = device_context(device());
  const char* source = static_cast<const char*>(data_ptr()) + low * static_cast<int64_t>(element);
  StreamHandle stream = context.current_stream();
  context.platform().copy_async(staging.data(), source, span, CopyKind::kDeviceToHost, stream);
  context.platform().synchronize_stream(stream);
  if (is_contiguous() && low == 0) {
    std::memcpy(result.data(), staging.data(), result.size());
    return result;
  }
  std::vector<int64_t> index(shape_.size(), 0);
  for (int64_t linear = 0; linear < numel(); ++linear) {
    int64_t position = -low;
    for (size_t i = 0; i < shape_.size(); ++i) position += index[i] * strides_[i];
    std::memcpy(result.data() + linear * element, staging.data() + position * element, element);
    for (size_t i = shape_.size(); i-- > 0;) {
      if (++index[i] < shape_[i]) break;
      index[i] = 0;
    }
  }
  return result;
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<uint8_t> bytes = to_host_bytes();
  std::vector<double> values(static_cast<size_t>(numel()));
  const size_t size = dtype_size(dtype_);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = load_element(bytes.data() + i * size, dtype_);
  return values;
}

void Tensor::copy_from_host(const void* host_data) {
  GROVE_CHECK(defined(), "copy_from_host into an undefined tensor");
  GROVE_CHECK_AS(ShapeError, is_contiguous(),
                 "copy_from_host into a non-contiguous tensor of shape ", shape_str(shape_));
  if (nbytes() == 0) return;
  DeviceContext& context = device_context(device());
  StreamHandle stream = context.current_stream();
  context.platform().copy_async(data_ptr(), host_data, nbytes(), CopyKind::kHostToDevice, stream);
  // The host buffer may go away as soon as we return.
  context.platform().synchronize_stream(stream);
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return str_cat("Tensor(", device().str(), ", ", dtype_name(dtype_), ", ", shape_str(shape_), ")");
}

}  // namespace grove::runtime
