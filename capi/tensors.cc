// The C API's output tensors: accessors, validity, host copies and DLPack.
#include <cstring>
#include <vector>

#include "capi/api_support.h"

using grove::capi::live;
using grove::capi::require;
using grove::capi::run_api;
using grove::runtime::Device;
using grove::runtime::Tensor;

extern "C" {

const char* grove_last_error(void) { return grove::capi::last_error().c_str(); }

void grove_string_free(char* text) { std::free(text); }

void grove_tensor_destroy(grove_tensor* tensor) {
  grove::runtime::CallerDeviceGuard
      caller_device;  // Note [The caller's current device stays as it was]
  try {
    delete tensor;
  } catch (...) {
    grove::capi::last_error() = "grove_tensor_destroy: an exception while releasing the tensor";
  }
}

grove_status grove_tensor_dtype(const grove_tensor* tensor, int32_t* dtype) {
  return run_api("grove_tensor_dtype", [&] {
    require(dtype != nullptr, "the output pointer `dtype` is null");
    *dtype = static_cast<int32_t>(live(tensor).tensor.dtype());
  });
}

grove_status grove_tensor_device(const grove_tensor* tensor, int32_t* device_type,
                                 int32_t* device_index) {
  return run_api("grove_tensor_device", [&] {
    require(device_type != nullptr && device_index != nullptr, "an output pointer is null");
    Device device = live(tensor).tensor.device();
    *device_type = static_cast<int32_t>(device.type);
    *device_index = device.index;
  });
}

grove_status grove_tensor_rank(const grove_tensor* tensor, int32_t* rank) {
  return run_api("grove_tensor_rank", [&] {
    require(rank != nullptr, "the output pointer `rank` is null");
    *rank = static_cast<int32_t>(live(tensor).tensor.dim());
  });
}

grove_status grove_tensor_shape(const grove_tensor* tensor, int64_t* shape) {
  return run_api("grove_tensor_shape", [&] {
    const Tensor& value = live(tensor).tensor;
    require(shape != nullptr || value.dim() == 0, "the output array `shape` is null");
    for (int64_t d = 0; d < value.dim(); ++d) shape[d] = value.shape()[static_cast<size_t>(d)];
  });
}

grove_status grove_tensor_strides(const grove_tensor* tensor, int64_t* strides) {
  return run_api("grove_tensor_strides", [&] {
    const Tensor& value = live(tensor).tensor;
    require(strides != nullptr || value.dim() == 0, "the output array `strides` is null");
    for (int64_t d = 0; d < value.dim(); ++d) strides[d] = value.strides()[static_cast<size_t>(d)];
  });
}

grove_status grove_tensor_data(const grove_tensor* tensor, void** data) {
  return run_api("grove_tensor_data", [&] {
    require(data != nullptr, "the output pointer `data` is null");
    *data = live(tensor).tensor.data_ptr();
  });
}

grove_status grove_tensor_is_valid(const grove_tensor* tensor, int32_t* valid) {
  return run_api("grove_tensor_is_valid", [&] {
    require(valid != nullptr, "the output pointer `valid` is null");
    const auto& storage = live(tensor).tensor.storage();
    *valid = storage != nullptr && !storage->is_poisoned() && !storage->is_overwritten() ? 1 : 0;
  });
}

grove_status grove_tensor_copy_to_host(const grove_tensor* tensor, void* host, size_t nbytes) {
  return run_api("grove_tensor_copy_to_host", [&] {
    const Tensor& value = live(tensor).tensor;
    require(host != nullptr || nbytes == 0, "the host buffer is null");
    require(nbytes == value.nbytes(), "the host buffer holds ", nbytes, " bytes; the tensor ",
            value.str(), " needs ", value.nbytes());
    std::vector<uint8_t> bytes = value.to_host_bytes();
    if (!bytes.empty()) std::memcpy(host, bytes.data(), bytes.size());
  });
}

grove_status grove_tensor_to_dlpack(const grove_tensor* tensor, void** managed_tensor) {
  return run_api("grove_tensor_to_dlpack", [&] {
    require(managed_tensor != nullptr, "the output pointer `managed_tensor` is null");
    *managed_tensor = grove::capi::to_dlpack(live(tensor).tensor);
  });
}

grove_status grove_dlpack_check(const void* managed_tensor) {
  return run_api("grove_dlpack_check", [&] {
    require(managed_tensor != nullptr, "the DLManagedTensor pointer is null");
    const auto* managed = static_cast<const DLManagedTensor*>(managed_tensor);
    require(grove::capi::made_by_grove(managed),
            "the DLManagedTensor was not made by grove (its deleter is another's)");
    grove::capi::dlpack_tensor(managed).data_ptr();
  });
}

}  // extern "C"
