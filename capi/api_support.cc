#include "capi/api_support.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include "capi/handed_out_storages.h"
#include "runtime/external_storage.h"

namespace grove::capi {
namespace {

using runtime::DeviceType;
using runtime::Shape;

constexpr int32_t kMaxRank = 8;

thread_local std::string t_last_error;

DType parse_dtype(int32_t dtype, const Subject& what) {
  require(dtype >= GROVE_F32 && dtype <= GROVE_F64, what, ": unknown dtype code ", dtype,
          " (grove_dtype: 0 f32, 1 f16, 2 bf16, 3 i32, 4 i64, 5 bool, 6 f64)");
  return static_cast<DType>(dtype);
}

Device parse_device(int32_t type, int32_t index, const Subject& what) {
  require(type >= GROVE_DEVICE_CPU && type <= GROVE_DEVICE_CUDA, what,
          ": unknown device type code ", type, " (0 cpu, 1 sim, 2 cuda)");
  require(index >= 0, what, ": negative device index ", index);
  return Device{static_cast<DeviceType>(type), index};
}

// What a DLManagedTensor made by grove_tensor_to_dlpack keeps alive.
struct DlpackContext {
  Tensor tensor;
  std::vector<int64_t> extents;  // the shape, then the strides
  DLManagedTensor managed;
};

void delete_dlpack(DLManagedTensor* managed) {
  // Releasing the tensor may free device memory (Note [The caller's current
  // device stays as it was]): PyTorch runs this from any of its frames.
  grove::runtime::CallerDeviceGuard caller_device;
  delete static_cast<DlpackContext*>(managed->manager_ctx);
}

DLDataType dlpack_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {kDLFloat, 32, 1};
    case DType::kF16:
      return {kDLFloat, 16, 1};
    case DType::kBF16:
      return {kDLBfloat, 16, 1};
    case DType::kI32:
      return {kDLInt, 32, 1};
    case DType::kI64:
      return {kDLInt, 64, 1};
    case DType::kBool:
      return {kDLUInt, 8, 1};  // DLPack 0.6 has no bool code; one byte per element
    case DType::kF64:
      return {kDLFloat, 64, 1};
  }
  throw grove::DTypeError("to_dlpack: unknown dtype");
}

}  // namespace

std::string& last_error() { return t_last_error; }

// The status of the exception being handled; sets the thread's message.
grove_status status_of_current_exception(const char* function) {
  auto fail = [function](grove_status status, const char* what) {
    try {
      last_error() = str_cat(function, ": ", what);
    } catch (...) {  // no memory even for the message: keep the status
      last_error().clear();
    }
    return status;
  };
  try {
    throw;
  } catch (const InvalidArgument& error) {
    return fail(GROVE_ERROR_INVALID_ARGUMENT, error.what());
  } catch (const grove::ShapeError& error) {
    return fail(GROVE_ERROR_SHAPE, error.what());
  } catch (const grove::DTypeError& error) {
    return fail(GROVE_ERROR_DTYPE, error.what());
  } catch (const grove::DeviceError& error) {
    return fail(GROVE_ERROR_DEVICE, error.what());
  } catch (const grove::StaleTensorError& error) {
    return fail(GROVE_ERROR_STALE, error.what());
  } catch (const grove::ModelFormatError& error) {
    return fail(GROVE_ERROR_MODEL_FORMAT, error.what());
  } catch (const grove::OutOfMemoryError& error) {
    return fail(GROVE_ERROR_OUT_OF_MEMORY, error.what());
  } catch (const std::bad_alloc&) {
    return fail(GROVE_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& error) {
    return fail(GROVE_ERROR_INTERNAL, error.what());
  } catch (...) {
    return fail(GROVE_ERROR_INTERNAL, "an unknown exception");
  }
}

std::ostream& operator<<(std::ostream& stream, const Subject& subject) {
  stream << subject.kind << " " << subject.index;
  if (subject.name != nullptr) stream << " ('" << *subject.name << "')";
  return stream;
}

Tensor view_of(const grove_tensor_desc& desc, const Subject& what) {
  grove::runtime::ReleaseCallback release;
  if (desc.release != nullptr) {
    release = [function = desc.release, context = desc.release_context] { function(context); };
  }
  struct ReleaseUnlessTaken {
    grove::runtime::ReleaseCallback* callback;
    ~ReleaseUnlessTaken() {
      if (*callback) (*callback)();
    }
  } guard{&release};
  DType dtype = parse_dtype(desc.dtype, what);
  Device device = parse_device(desc.device_type, desc.device_index, what);
  require(desc.rank >= 0 && desc.rank <= kMaxRank, what, ": rank ", desc.rank, " is outside 0..",
          kMaxRank);
  require(desc.rank == 0 || desc.shape != nullptr, what, ": rank ", desc.rank,
          " but the shape pointer is null");
  Shape shape;
  Shape strides;
  for (int32_t d = 0; d < desc.rank; ++d) {
    shape.push_back(desc.shape[d]);
    if (desc.strides != nullptr) strides.push_back(desc.strides[d]);
  }
  std::string stale;
  if (inside_stale_hand_out(desc.data, &stale)) [[unlikely]] {
    throw grove::StaleTensorError(str_cat(what,
                                          " is memory grove handed out as an output that "
                                          "is no longer valid: ",
                                          stale));
  }
  grove::runtime::ReleaseCallback taken = std::move(release);
  release = nullptr;
  try {
    return grove::runtime::external_tensor(desc.data, shape, strides, dtype, device,
                                           std::move(taken));
  } catch (const grove::Error& error) {
    throw grove::ShapeError(str_cat(what, ": ", error.what()));
  }
}

void release_all(const grove_tensor_desc* descs, size_t count, size_t from) {
  if (descs == nullptr) return;
  for (size_t i = from; i < count; ++i) {
    if (descs[i].release != nullptr) descs[i].release(descs[i].release_context);
  }
}

char* copy_string(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

DLManagedTensor* to_dlpack(const Tensor& value) {
  auto context = std::make_unique<DlpackContext>();
  context->tensor = value;
  void* data = value.data_ptr();         // throws StaleTensorError for stale data
  remember_handed_out(value.storage());  // Note [Stale hand-outs as inputs]
  const auto rank = static_cast<size_t>(value.dim());
  context->extents.resize(2 * rank);
  for (size_t d = 0; d < rank; ++d) {
    context->extents[d] = value.shape()[d];
    context->extents[rank + d] = value.strides()[d];
  }
  Device device = value.device();
  DLTensor& dl = context->managed.dl_tensor;
  dl.data = data;
  dl.device = {device.is_cuda() ? kDLCUDA : kDLCPU, device.is_cuda() ? device.index : 0};
  dl.ndim = static_cast<int32_t>(value.dim());
  dl.dtype = dlpack_dtype(value.dtype());
  dl.shape = context->extents.data();
  dl.strides = context->extents.data() + rank;
  dl.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = delete_dlpack;
  return &context.release()->managed;
}

bool made_by_grove(const DLManagedTensor* managed) { return managed->deleter == delete_dlpack; }

const Tensor& dlpack_tensor(const DLManagedTensor* managed) {
  return static_cast<const DlpackContext*>(managed->manager_ctx)->tensor;
}

const grove_tensor& live(const grove_tensor* tensor) {
  require(tensor != nullptr, "the tensor handle is null");
  return *tensor;
}

namespace {

void leave_call(grove_model& model) {
  // The last call out wakes a destroy that waits for it.
  if (model.calls_in_flight.fetch_sub(1) == 1 && model.closing.load()) {
    model.calls_in_flight.notify_all();
  }
}

}  // namespace

ModelCall::ModelCall(const grove_model* model) : model_(const_cast<grove_model*>(model)) {
  require(model != nullptr, "the model handle is null");
  // Announce the call, then look for a destroy: in the single total order of
  // these sequentially consistent operations, either this call sees `closing`
  // or the destroy sees this call in flight (Note [Destroying a model in use]).
  model_->calls_in_flight.fetch_add(1);
  if (model_->closing.load()) {
    leave_call(*model_);
    throw InvalidArgument(
        "the model is being destroyed (grove_model_destroy runs on another thread); no call may "
        "start on it now");
  }
}

ModelCall::~ModelCall() { leave_call(*model_); }

}  // namespace grove::capi
