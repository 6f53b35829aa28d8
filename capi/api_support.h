// What the C API's translation units share (capi/grove.cc, capi/tensors.cc,
// capi/api_support.cc): the handles' layouts, the guard every entry point runs
// in, argument checks, and caller-memory descriptions as grove tensors.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "capi/grove.h"
#include "capi/output_keys.h"
#include "compiler/backends/compile.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

struct grove_model {
  std::optional<grove::compiler::backends::CompiledModel> compiled;
  grove::runtime::Device device;
  std::vector<std::string> input_names;
  std::vector<int32_t> output_dtypes;
  size_t output_count = 0;
  std::atomic<int64_t> borrowed_copies{0};
  // Note [Destroying a model in use] (capi/grove.cc).
  mutable std::atomic<int64_t> calls_in_flight{0};
  std::atomic<bool> closing{false};
  // Note [Outputs over cached storage] (capi/handout.cc).
  grove::capi::OutputKeys output_keys;
};

struct grove_tensor {
  grove::runtime::Tensor tensor;
};

namespace grove::capi {

using runtime::Device;
using runtime::DType;
using runtime::Tensor;

// The calling thread's last error message (grove_last_error).
std::string& last_error();

// Errors of the caller's arguments (null pointers, counts, unknown names).
struct InvalidArgument : grove::Error {
  using grove::Error::Error;
};

// An argument check whose failure is GROVE_ERROR_INVALID_ARGUMENT.
template <typename... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) throw InvalidArgument(str_cat(parts...));
}

// The status of the exception being handled; sets the thread's message.
grove_status status_of_current_exception(const char* function);

// Note [No exception crosses the C API]: every entry point runs its body in
// run_api, which turns any exception into a grove_status (following the
// error's class) and the thread's last-error message, so a C or ctypes
// caller never unwinds through C++ frames. Guarded by
// CApi.EveryFailingCallSetsAStatusAndAMessage (tests/capi/capi_test.cc).
// It also puts back the caller's current CUDA device (Note [The caller's
// current device stays as it was], runtime/device_context.h).
template <typename Body>
grove_status run_api(const char* function, Body&& body) noexcept {
  grove::runtime::CallerDeviceGuard caller_device;
  try {
    body();
    return GROVE_OK;
  } catch (...) {
    return status_of_current_exception(function);
  }
}

// What a description describes ("input 0 ('x')"), formatted only when a
// check fails: building the text on every call cost more than the call.
struct Subject {
  const char* kind;
  size_t index;
  const std::string* name;  // may be null
};

std::ostream& operator<<(std::ostream& stream, const Subject& subject);

// A grove tensor viewing the caller's memory; the description's release runs
// once whether or not it is good.
Tensor view_of(const grove_tensor_desc& desc, const Subject& what);
// Runs the release of descriptions [from, count) (those grove never took).
void release_all(const grove_tensor_desc* descs, size_t count, size_t from);
// A malloc'ed copy for grove_string_free.
char* copy_string(const std::string& text);
// A DLManagedTensor holding its own reference to `value`; throws
// StaleTensorError for stale data.
DLManagedTensor* to_dlpack(const Tensor& value);
// Whether `managed` was made by to_dlpack (its deleter is grove's).
bool made_by_grove(const DLManagedTensor* managed);
// The tensor a DLManagedTensor made by to_dlpack views.
const Tensor& dlpack_tensor(const DLManagedTensor* managed);

const grove_tensor& live(const grove_tensor* tensor);

// Runs `model` on inputs already viewed (`borrowed`: the storages of borrowed
// descriptions, detached after the call: Note [Borrowed inputs], grove.cc) on
// the caller's stream (Note [Calls from the legacy default stream]); at most
// `capacity` results.
grove::compiler::TensorList run_viewed(grove_model& model, grove::compiler::TensorList tensors,
                                       const std::vector<grove::runtime::StoragePtr>& borrowed,
                                       void* stream, size_t capacity);
// A DLManagedTensor per result into managed[0..results.size()), all or none.
void to_dlpack_all(const grove::compiler::TensorList& results, void** managed);
// grove_model_run_dlpack's work, inside an invocation begun and ended around
// it when `invocation_key` is set; `keys` (may be null) receives each output's
// OutputKeys key (Note [Outputs over cached storage], capi/handout.cc).
grove_status run_dlpack(const char* api, grove_model* model, std::optional<uint64_t> invocation_key,
                        const grove_tensor_desc* inputs, size_t input_count, void* stream,
                        void** managed, uint64_t* keys, size_t capacity, size_t* count);

// One entry point's use of a model, from its first look at the handle to its
// return: grove_model_destroy waits until none is left (Note [Destroying a
// model in use]). Throws InvalidArgument for a null handle or one that is
// being destroyed.
class ModelCall {
 public:
  explicit ModelCall(const grove_model* model);
  ~ModelCall();
  ModelCall(const ModelCall&) = delete;
  ModelCall& operator=(const ModelCall&) = delete;
  grove_model& model() const { return *model_; }

 private:
  grove_model* model_;
};

}  // namespace grove::capi
