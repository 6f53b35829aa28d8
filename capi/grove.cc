// The C API over CompiledModel (compiler/backends/compile.h), the one door to
// grove's backends. Every entry point catches everything: no exception
// crosses the C boundary (Note [No exception crosses the C API]).
#include "capi/grove.h"

#include <dlpack/dlpack.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/external_storage.h"

struct grove_model {
  std::optional<grove::compiler::backends::CompiledModel> compiled;
  grove::runtime::Device device;
  std::vector<std::string> input_names;
  std::vector<int32_t> output_dtypes;
  size_t output_count = 0;
  std::atomic<int64_t> borrowed_copies{0};
};

struct grove_tensor {
  grove::runtime::Tensor tensor;
};

namespace {

using grove::str_cat;
using grove::runtime::Device;
using grove::runtime::DeviceType;
using grove::runtime::DType;
using grove::runtime::Shape;
using grove::runtime::Tensor;
namespace backends = grove::compiler::backends;

constexpr int32_t kMaxRank = 8;

thread_local std::string t_last_error;

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
grove_status status_of_current_exception(const char* function) {
  auto fail = [function](grove_status status, const char* what) {
    try {
      t_last_error = str_cat(function, ": ", what);
    } catch (...) {  // no memory even for the message: keep the status
      t_last_error.clear();
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

// Note [No exception crosses the C API]: every entry point runs its body in
// run_api, which turns any exception into a grove_status (following the
// error's class) and the thread's last-error message, so a C or ctypes
// caller never unwinds through C++ frames. Guarded by
// CApi.EveryFailingCallSetsAStatusAndAMessage (tests/capi/capi_test.cc).
template <typename Body>
grove_status run_api(const char* function, Body&& body) noexcept {
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

std::ostream& operator<<(std::ostream& stream, const Subject& subject) {
  stream << subject.kind << " " << subject.index;
  if (subject.name != nullptr) stream << " ('" << *subject.name << "')";
  return stream;
}

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

// A grove tensor viewing the caller's memory. The release callback is owned
// from the first line, so it runs once whether or not the description is good.
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

backends::CompileOptions parse_options(const char* options_json,
                                       grove::compiler::model_format::DimBindings* dims,
                                       Device* device) {
  backends::CompileOptions options;
  *device = grove::runtime::default_device();
  if (options_json == nullptr || *options_json == '\0') return options;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(options_json);
  } catch (const nlohmann::json::exception& error) {
    throw InvalidArgument(str_cat("options are not JSON: ", error.what()));
  }
  require(json.is_object(), "options must be a JSON object, found ", json.type_name());
  for (const auto& [key, value] : json.items()) {
    if (key == "backend") {
      require(value.is_string(), "option 'backend' must be a string");
      options.backend = value.get<std::string>();
    } else if (key == "device") {
      require(value.is_string(), "option 'device' must be a string such as \"sim:0\"");
      *device = Device::parse(value.get<std::string>());
    } else if (key == "dims") {
      require(value.is_object(), "option 'dims' must map dimension names to integers");
      for (const auto& [name, size] : value.items()) {
        require(size.is_number_integer(), "option 'dims': '", name, "' must be an integer");
        (*dims)[name] = size.get<int64_t>();
      }
    } else if (key == "never_capture" || key == "skip_warmup") {
      require(value.is_boolean(), "option '", key, "' must be true or false");
      (key == "never_capture" ? options.never_capture : options.skip_warmup) = value.get<bool>();
    } else {
      throw InvalidArgument(str_cat("unknown option '", key,
                                    "' (known: backend, device, dims, never_capture, "
                                    "skip_warmup)"));
    }
  }
  options.device = *device;
  return options;
}

char* copy_string(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

// What a DLManagedTensor made by grove_tensor_to_dlpack keeps alive.
struct DlpackContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed;
};

void delete_dlpack(DLManagedTensor* managed) {
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

const grove_tensor& live(const grove_tensor* tensor) {
  require(tensor != nullptr, "the tensor handle is null");
  return *tensor;
}

const grove_model& live(const grove_model* model) {
  require(model != nullptr, "the model handle is null");
  return *model;
}

}  // namespace

extern "C" {

const char* grove_last_error(void) { return t_last_error.c_str(); }

int grove_capi_version(void) { return GROVE_CAPI_VERSION; }

grove_status grove_compile(const char* program_json, const char* options_json,
                           const grove_state_binding* bindings, size_t binding_count,
                           grove_model** model) {
  size_t handed = 0;  // bindings whose release grove owns
  grove_status status = run_api("grove_compile", [&] {
    require(model != nullptr, "the output pointer `model` is null");
    *model = nullptr;
    require(program_json != nullptr, "the program text is null");
    require(bindings != nullptr || binding_count == 0, binding_count,
            " bindings but the array is null");
    grove::compiler::model_format::DimBindings dims;
    Device device;
    backends::CompileOptions options = parse_options(options_json, &dims, &device);
    grove::compiler::ir::Program program =
        grove::compiler::model_format::load_model(program_json, dims, device);
    std::map<std::string, Tensor> bound;
    for (size_t i = 0; i < binding_count; ++i) {
      const grove_state_binding& binding = bindings[i];
      handed = i + 1;  // view_of owns this binding's release from here on
      const std::string name = binding.name != nullptr ? binding.name : "";
      const Subject what{"binding", i, &name};
      Tensor tensor = view_of(binding.tensor, what);
      require(binding.name != nullptr, what, ": the name is null");
      require(bound.count(binding.name) == 0, what, ": '", binding.name, "' is bound twice");
      bound.emplace(binding.name, std::move(tensor));
    }
    for (const auto& [name, tensor] : bound) {
      bool known = false;
      for (grove::compiler::ir::ValueId id : program.inputs()) {
        const auto& value = program.value(id);
        if (value.name == name && value.is_persistent()) known = true;
      }
      require(known, "binding '", name, "': the program '", program.name(),
              "' has no param or buffer of that name");
      require(tensor.is_contiguous(), "binding '", name,
              "': bound params and buffers must be contiguous (the tree checks their address, "
              "never copies them); pass a contiguous tensor");
    }
    backends::StateBinder bind = [&](const grove::compiler::ir::Value& value) {
      auto found = bound.find(value.name);
      if (found == bound.end()) return backends::initial_tensor(value, device);
      const Tensor& tensor = found->second;
      GROVE_CHECK_AS(grove::ShapeError,
                     tensor.device() == value.type.device && tensor.dtype() == value.type.dtype &&
                         tensor.shape() == value.type.shape,
                     "binding '", value.name,
                     "': ", grove::compiler::ir::value_kind_name(value.kind), " of type ",
                     value.type.str(), " is bound to a ",
                     grove::runtime::dtype_name(tensor.dtype()), " tensor of shape ",
                     grove::runtime::shape_str(tensor.shape()), " on ", tensor.device().str());
      return tensor;
    };
    auto result = std::make_unique<grove_model>();
    result->device = device;
    result->compiled.emplace(
        backends::compile(program, options, bind, backends::make_backend(options.backend)));
    result->input_names = result->compiled->input_names();
    const auto& program_outputs = result->compiled->program().outputs();
    result->output_count = program_outputs.size();
    for (grove::compiler::ir::ValueId id : program_outputs) {
      result->output_dtypes.push_back(
          static_cast<int32_t>(result->compiled->program().value(id).type.dtype));
    }
    *model = result.release();
  });
  if (status != GROVE_OK) {
    // Descriptions not yet handed to grove are released here, so each
    // binding's release runs exactly once whatever failed.
    for (size_t i = handed; i < binding_count && bindings != nullptr; ++i) {
      if (bindings[i].tensor.release != nullptr)
        bindings[i].tensor.release(bindings[i].tensor.release_context);
    }
  }
  return status;
}

void grove_model_destroy(grove_model* model) {
  try {
    delete model;
  } catch (...) {
    t_last_error = "grove_model_destroy: an exception while destroying the model";
  }
}

grove_status grove_model_input_count(const grove_model* model, size_t* count) {
  return run_api("grove_model_input_count", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = live(model).input_names.size();
  });
}

grove_status grove_model_input_name(const grove_model* model, size_t index, const char** name) {
  return run_api("grove_model_input_name", [&] {
    require(name != nullptr, "the output pointer `name` is null");
    const grove_model& checked_model = live(model);
    require(index < checked_model.input_names.size(), "input index ", index,
            " is out of range; the model has ", checked_model.input_names.size(), " inputs");
    *name = checked_model.input_names[index].c_str();
  });
}

grove_status grove_model_output_count(const grove_model* model, size_t* count) {
  return run_api("grove_model_output_count", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = live(model).output_count;
  });
}

}  // extern "C"

namespace {

// Note [Borrowed inputs]: an input described with a NULL release is borrowed
// for the call only, and costs the caller nothing per call (no callback). After
// the call grove must not view it any more: a storage that someone besides the
// call still holds (an output that is a view of the input; the backends keep
// only weak references) is pointed at a device copy of its bytes
// (Storage::rebind), so that output stays valid when the caller frees the
// input. Counted by grove_model_borrowed_copies. Guarded by
// CApi.OutputViewingABorrowedInputGetsACopy and
// CApi.BorrowedInputsAreNotCopiedWhenNothingViewsThem.
void detach_borrowed(grove_model& model, const std::vector<grove::runtime::StoragePtr>& borrowed) {
  for (const grove::runtime::StoragePtr& storage : borrowed) {
    if (storage.use_count() <= 1) continue;
    const size_t nbytes = storage->nbytes();
    Tensor copy = Tensor::empty({static_cast<int64_t>(nbytes)}, DType::kBool, storage->device());
    grove::runtime::DeviceContext& context = grove::runtime::device_context(storage->device());
    if (nbytes > 0) {
      context.backend().copy_async(copy.data_ptr(), storage->data(), nbytes,
                                   grove::runtime::CopyKind::kDeviceToDevice,
                                   context.current_stream());
    }
    storage->rebind(copy.data_ptr(), copy.storage()->release_owner());
    ++model.borrowed_copies;
  }
}

// Runs the model on caller-described inputs; `handed` counts the descriptions
// whose release grove owns (the rest are released by the caller of this).
grove::compiler::TensorList run_model(grove_model& model, const grove_tensor_desc* inputs,
                                      size_t input_count, void* stream, size_t capacity,
                                      size_t* handed) {
  require(inputs != nullptr || input_count == 0, input_count, " inputs but the array is null");
  require(model.output_count <= capacity, "the model returns ", model.output_count,
          " outputs but `outputs` holds ", capacity);
  const Device device = model.device;
  require(stream == nullptr || device.is_cuda(), "a stream was given but the model runs on ",
          device.str(), "; pass NULL (only cuda models run on a caller's stream)");
  grove::compiler::TensorList tensors;
  tensors.reserve(input_count);
  std::vector<grove::runtime::StoragePtr> borrowed;
  for (; *handed < input_count;) {
    const size_t index = (*handed)++;
    const std::string* name =
        index < model.input_names.size() ? &model.input_names[index] : nullptr;
    tensors.push_back(view_of(inputs[index], Subject{"input", index, name}));
    if (inputs[index].release == nullptr) borrowed.push_back(tensors.back().storage());
  }
  std::optional<grove::runtime::StreamGuard> on_stream;
  if (device.is_cuda()) on_stream.emplace(device, grove::runtime::StreamHandle{stream});
  grove::compiler::TensorList results = (*model.compiled)(tensors);
  tensors.clear();
  if (!borrowed.empty()) detach_borrowed(model, borrowed);
  GROVE_CHECK(results.size() <= capacity, "the model returned ", results.size(),
              " outputs, more than the ", capacity, " it declared");
  return results;
}

// A DLManagedTensor holding its own reference to `value`.
DLManagedTensor* to_dlpack(const Tensor& value) {
  auto context = std::make_unique<DlpackContext>();
  context->tensor = value;
  void* data = value.data_ptr();  // throws StaleTensorError for stale data
  for (int64_t d = 0; d < value.dim(); ++d) {
    context->shape.push_back(value.shape()[static_cast<size_t>(d)]);
    context->strides.push_back(value.strides()[static_cast<size_t>(d)]);
  }
  Device device = value.device();
  DLTensor& dl = context->managed.dl_tensor;
  dl.data = data;
  dl.device = {device.is_cuda() ? kDLCUDA : kDLCPU, device.is_cuda() ? device.index : 0};
  dl.ndim = static_cast<int32_t>(value.dim());
  dl.dtype = dlpack_dtype(value.dtype());
  dl.shape = context->shape.data();
  dl.strides = context->strides.data();
  dl.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = delete_dlpack;
  return &context.release()->managed;
}

}  // namespace

extern "C" {

grove_status grove_model_run(grove_model* model, const grove_tensor_desc* inputs,
                             size_t input_count, void* stream, grove_tensor** outputs,
                             size_t capacity, size_t* count) {
  size_t handed = 0;  // descriptions whose release grove owns
  grove_status status = run_api("grove_model_run", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = 0;
    require(model != nullptr, "the model handle is null");
    require(outputs != nullptr || capacity == 0, "capacity ", capacity,
            " but the outputs array is null");
    grove::compiler::TensorList results =
        run_model(*model, inputs, input_count, stream, capacity, &handed);
    std::vector<std::unique_ptr<grove_tensor>> handles;
    handles.reserve(results.size());
    for (Tensor& result : results) {
      handles.push_back(std::make_unique<grove_tensor>(grove_tensor{std::move(result)}));
    }
    for (size_t i = 0; i < handles.size(); ++i) outputs[i] = handles[i].release();
    *count = handles.size();
  });
  if (status != GROVE_OK) release_all(inputs, input_count, handed);
  return status;
}

grove_status grove_model_run_dlpack(grove_model* model, const grove_tensor_desc* inputs,
                                    size_t input_count, void* stream, void** managed,
                                    size_t capacity, size_t* count) {
  size_t handed = 0;
  grove_status status = run_api("grove_model_run_dlpack", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = 0;
    require(model != nullptr, "the model handle is null");
    require(managed != nullptr || capacity == 0, "capacity ", capacity,
            " but the `managed` array is null");
    grove::compiler::TensorList results =
        run_model(*model, inputs, input_count, stream, capacity, &handed);
    std::vector<DLManagedTensor*> made;
    made.reserve(results.size());
    try {
      for (const Tensor& result : results) made.push_back(to_dlpack(result));
    } catch (...) {
      for (DLManagedTensor* tensor : made) tensor->deleter(tensor);
      throw;
    }
    for (size_t i = 0; i < made.size(); ++i) managed[i] = made[i];
    *count = made.size();
  });
  if (status != GROVE_OK) release_all(inputs, input_count, handed);
  return status;
}

grove_status grove_dlpack_check(const void* managed_tensor) {
  return run_api("grove_dlpack_check", [&] {
    require(managed_tensor != nullptr, "the DLManagedTensor pointer is null");
    const auto* managed = static_cast<const DLManagedTensor*>(managed_tensor);
    require(managed->deleter == delete_dlpack,
            "the DLManagedTensor was not made by grove (its deleter is another's)");
    static_cast<const DlpackContext*>(managed->manager_ctx)->tensor.data_ptr();
  });
}

grove_status grove_model_output_dtype(const grove_model* model, size_t index, int32_t* dtype) {
  return run_api("grove_model_output_dtype", [&] {
    require(dtype != nullptr, "the output pointer `dtype` is null");
    const grove_model& checked_model = live(model);
    require(index < checked_model.output_dtypes.size(), "output index ", index,
            " is out of range; the model has ", checked_model.output_dtypes.size(), " outputs");
    *dtype = checked_model.output_dtypes[index];
  });
}

grove_status grove_model_borrowed_copies(const grove_model* model, int64_t* count) {
  return run_api("grove_model_borrowed_copies", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = live(model).borrowed_copies.load();
  });
}

grove_status grove_model_time_runs(grove_model* model, const grove_tensor_desc* inputs,
                                   size_t input_count, void* stream, int64_t calls,
                                   double* seconds_per_call) {
  size_t handed = 0;
  grove_status status = run_api("grove_model_time_runs", [&] {
    require(seconds_per_call != nullptr, "the output pointer `seconds_per_call` is null");
    const grove_model& checked_model = live(model);
    require(calls > 0, "calls must be positive, found ", calls);
    require(inputs != nullptr || input_count == 0, input_count, " inputs but the array is null");
    const Device device = checked_model.device;
    require(stream == nullptr || device.is_cuda(), "a stream was given but the model runs on ",
            device.str(), "; pass NULL");
    grove::compiler::TensorList tensors;
    for (; handed < input_count;) {
      const size_t index = handed++;
      tensors.push_back(view_of(inputs[index], Subject{"input", index, nullptr}));
    }
    std::optional<grove::runtime::StreamGuard> on_stream;
    if (device.is_cuda()) on_stream.emplace(device, grove::runtime::StreamHandle{stream});
    const auto& compiled = *checked_model.compiled;
    auto start = std::chrono::steady_clock::now();
    for (int64_t call = 0; call < calls; ++call) compiled(tensors);
    grove::runtime::DeviceContext& context = grove::runtime::device_context(device);
    context.backend().synchronize_stream(context.current_stream());
    *seconds_per_call =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(calls);
  });
  if (status != GROVE_OK) release_all(inputs, input_count, handed);
  return status;
}

grove_status grove_model_state(const grove_model* model, const char* name, grove_tensor** tensor) {
  return run_api("grove_model_state", [&] {
    require(tensor != nullptr, "the output pointer `tensor` is null");
    require(name != nullptr, "the state name is null");
    *tensor = new grove_tensor{live(model).compiled->state(name)};
  });
}

grove_status grove_model_mark_step_begin(grove_model* model) {
  return run_api("grove_model_mark_step_begin", [&] { live(model).compiled->mark_step_begin(); });
}

grove_status grove_model_stats_json(const grove_model* model, char** text) {
  return run_api("grove_model_stats_json", [&] {
    require(text != nullptr, "the output pointer `text` is null");
    *text = copy_string(live(model).compiled->backend_stats());
  });
}

grove_status grove_model_dot(const grove_model* model, char** text) {
  return run_api("grove_model_dot", [&] {
    require(text != nullptr, "the output pointer `text` is null");
    *text = copy_string(live(model).compiled->backend_dot());
  });
}

void grove_string_free(char* text) { std::free(text); }

void grove_tensor_destroy(grove_tensor* tensor) {
  try {
    delete tensor;
  } catch (...) {
    t_last_error = "grove_tensor_destroy: an exception while releasing the tensor";
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
    *managed_tensor = to_dlpack(live(tensor).tensor);
  });
}

}  // extern "C"
