// The C API over CompiledModel (compiler/backends/compile.h), the one door to
// grove's backends: compiling, running and the model's queries. Every entry
// point runs in run_api (Note [No exception crosses the C API]).
#include "capi/grove.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capi/api_support.h"
#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/backend/thread_trees.h"
#include "distributed/gradient_all_reduce.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/launch_clock.h"
#include "runtime/platform.h"

namespace {

using grove::str_cat;
using grove::capi::InvalidArgument;
using grove::capi::ModelCall;
using grove::capi::release_all;
using grove::capi::require;
using grove::capi::run_api;
using grove::capi::Subject;
using grove::capi::view_of;
using grove::runtime::Device;
using grove::runtime::DType;
using grove::runtime::Tensor;
namespace backends = grove::compiler::backends;

// A training step's forward and backward run as the tree's forward and
// backward stages (Note [Training steps], cudagraph_trees/backend), so the
// forward's saved activations stay in the tree's pool for the backward.
backends::Stage parse_stage(const std::string& name) {
  for (backends::Stage stage : {backends::Stage::kInference, backends::Stage::kForward,
                                backends::Stage::kBackward, backends::Stage::kOptimizer}) {
    if (name == backends::stage_name(stage)) return stage;
  }
  throw InvalidArgument(str_cat("option 'stage' is '", name,
                                "'; use \"inference\", \"forward\", \"backward\" or "
                                "\"optimizer\""));
}

// The option "gradient_all_reduce" (a data-parallel backward, capi/grove.h).
grove::distributed::AllReduceOptions parse_all_reduce(const nlohmann::json& value) {
  require(value.is_object(), "option 'gradient_all_reduce' must be a JSON object");
  grove::distributed::AllReduceOptions options;
  options.overlap = false;
  for (const auto& [key, item] : value.items()) {
    if (key == "outputs") {
      require(item.is_array(), "option 'gradient_all_reduce': 'outputs' must be a list");
      options.outputs.emplace();
      for (const auto& position : item) {
        require(position.is_number_unsigned(),
                "option 'gradient_all_reduce': 'outputs' holds output positions (integers >= 0)");
        options.outputs->insert(position.get<size_t>());
      }
    } else if (key == "op") {
      require(item.is_string(), "option 'gradient_all_reduce': 'op' must be \"mean\" or \"sum\"");
      options.reduce_op = item.get<std::string>();
    } else if (key == "bucket_bytes") {
      require(item.is_number_integer(),
              "option 'gradient_all_reduce': 'bucket_bytes' must be an "
              "integer");
      options.bucket_bytes = item.get<int64_t>();
    } else if (key == "overlap") {
      require(item.is_boolean(), "option 'gradient_all_reduce': 'overlap' must be true or false");
      options.overlap = item.get<bool>();
    } else {
      throw InvalidArgument(str_cat("option 'gradient_all_reduce': unknown key '", key,
                                    "' (known: outputs, op, bucket_bytes, overlap)"));
    }
  }
  return options;
}

backends::CompileOptions parse_options(
    const char* options_json, grove::compiler::model_format::DimBindings* dims, Device* device,
    std::optional<grove::distributed::AllReduceOptions>* all_reduce) {
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
    } else if (key == "stage") {
      require(value.is_string(), "option 'stage' must be a string");
      options.stage = parse_stage(value.get<std::string>());
    } else if (key == "never_capture" || key == "skip_warmup" || key == "gemm_search" ||
               key == "sibling_gemms") {
      require(value.is_boolean(), "option '", key, "' must be true or false");
      (key == "never_capture" ? options.never_capture
       : key == "skip_warmup" ? options.skip_warmup
       : key == "gemm_search" ? options.gemm_search
                              : options.sibling_gemms) = value.get<bool>();
    } else if (key == "gradient_all_reduce") {
      *all_reduce = parse_all_reduce(value);
    } else if (key == "small_m_gemm") {
      const std::string mode = value.is_string() ? value.get<std::string>() : "?";
      require(mode.empty() || mode == "off" || mode == "on" || mode == "auto",
              "option 'small_m_gemm' must be \"off\", \"on\" or \"auto\" (or \"\": ",
              "GROVE_SMALL_M_GEMM decides), found ", value.dump());
      options.small_m_gemm = mode;
    } else {
      throw InvalidArgument(
          str_cat("unknown option '", key,
                  "' (known: backend, device, dims, stage, never_capture, "
                  "skip_warmup, gradient_all_reduce, small_m_gemm, gemm_search, sibling_gemms)"));
    }
  }
  options.device = *device;
  return options;
}

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
      context.platform().copy_async(copy.data_ptr(), storage->data(), nbytes,
                                    grove::runtime::CopyKind::kDeviceToDevice,
                                    context.current_stream());
    }
    storage->rebind(copy.data_ptr(), copy.storage()->release_owner());
    ++model.borrowed_copies;
  }
}

// Note [Calls from the legacy default stream]
// PyTorch's default stream is CUDA's legacy default stream (NULL), on which
// nothing can be captured and the runtime refuses cuBLAS. A cuda call that
// names it runs instead on the calling thread's legacy-ordered stream
// (DeviceContext::legacy_ordered_stream, a CUDA blocking stream): CUDA itself
// orders that stream's work after the work already queued on the legacy
// stream, and the legacy stream's later work after it, so a call makes no
// event call at all and the host never waits. Each thread has its own such
// stream, so two threads' calls are not ordered with each other (as with
// two threads' own streams). GROVE_LEGACY_STREAM_ORDER=events (read at
// each call, so one process can time both: benchmarks/door_call_layers.py)
// runs such a call on the thread's own non-blocking grove stream ordered by
// the thread's ordering event (DeviceContext::ordering_event) recorded and
// waited on at once each way (four event calls); "blocking" is the default.
// Any other stream is used as it is. Tests:
// CApiCuda.RunsOnCallerDeviceMemoryAndTheCallersStreamLikeSim (the caller's
// stream and NULL), GpuTorchBackendTest.
// test_calls_from_the_legacy_stream_are_ordered_both_ways (both modes,
// tests/python/gpu_torch_backend_test.py).
bool legacy_calls_ordered_by_events() {
  const char* mode = std::getenv("GROVE_LEGACY_STREAM_ORDER");
  if (mode == nullptr || *mode == '\0' || std::strcmp(mode, "blocking") == 0) return false;
  GROVE_CHECK_AS(grove::ConfigError, std::strcmp(mode, "events") == 0,
                 "GROVE_LEGACY_STREAM_ORDER='", mode,
                 "': expected 'blocking' (the default) or 'events'");
  return true;
}

// Note [Host callers of an asynchronous sim]
// A sim model's caller is host code with no stream to order its reads by (the
// torch door hands sim outputs to PyTorch as CPU tensors, which PyTorch reads
// at once), so a sim call returns with its work done. The synchronous sim does
// that by itself; with GROVE_SIM_ASYNC=1 each stream runs on a worker thread,
// and the call waits for its stream before it returns, also when it failed.
// Without that wait the door fuzzer under GROVE_SIM_ASYNC=1 read half-written
// outputs (seed 500000: 0.99 relative error in eager mode); with it the
// fuzzer's orderings inside grove are checked by the sim's hazard checker.
// Tests: DoorFuzzTest.test_random_split_programs_on_an_asynchronous_sim
// (tests/python/door_fuzz_test.py), TrainingFuzzTest.
// test_random_programs_train_on_an_asynchronous_sim, //tests/capi:capi_test_async
// and capi_c_test_async (the C API suites with GROVE_SIM_ASYNC=1).
class CallerStream {
 public:
  CallerStream(Device device, void* stream) {
    if (!device.is_cuda()) {
      grove::runtime::DeviceContext& context = grove::runtime::device_context(device);
      if (context.platform().streams_asynchronous()) host_waits_ = &context;
      return;
    }
    const bool legacy = stream == nullptr || stream == kCudaStreamLegacy;
    if (!legacy) {
      guard_.emplace(device, grove::runtime::StreamHandle{stream});
      return;
    }
    grove::runtime::DeviceContext& context = grove::runtime::device_context(device);
    if (!legacy_calls_ordered_by_events()) {
      guard_.emplace(device, context.legacy_ordered_stream());
      return;
    }
    legacy_ = grove::runtime::StreamHandle{stream};
    event_ = context.ordering_event();
    grove::runtime::Platform& platform = context.platform();
    platform.record_event(event_, legacy_);
    platform.stream_wait_event(context.current_stream(), event_);
    context_ = &context;
  }
  // Orders the caller's legacy stream after what this call queued (events mode), or
  // waits for the call's stream (an asynchronous sim).
  void finish() {
    if (host_waits_ != nullptr) {
      grove::runtime::DeviceContext* context = std::exchange(host_waits_, nullptr);
      context->platform().synchronize_stream(context->current_stream());
      return;
    }
    if (context_ == nullptr) return;
    grove::runtime::DeviceContext* context = std::exchange(context_, nullptr);
    grove::runtime::Platform& platform = context->platform();
    platform.record_event(event_, context->current_stream());
    platform.stream_wait_event(legacy_, event_);
  }
  // A call that failed still orders the legacy stream after its queued work.
  ~CallerStream() {
    try {
      finish();
    } catch (...) {  // the call's own error is the one reported
    }
  }
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;

 private:
  static inline void* const kCudaStreamLegacy = reinterpret_cast<void*>(0x1);
  std::optional<grove::runtime::StreamGuard> guard_;
  grove::runtime::DeviceContext* context_ = nullptr;
  grove::runtime::DeviceContext* host_waits_ = nullptr;  // an asynchronous sim's
  grove::runtime::StreamHandle legacy_;
  grove::runtime::EventHandle event_;
};

// Runs the model on caller-described inputs; `handed` counts the descriptions
// whose release grove owns (the rest are released by the caller of this).
grove::compiler::TensorList run_model(grove_model& model, const grove_tensor_desc* inputs,
                                      size_t input_count, void* stream, size_t capacity,
                                      size_t* handed) {
  require(inputs != nullptr || input_count == 0, input_count, " inputs but the array is null");
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
  return grove::capi::run_viewed(model, std::move(tensors), borrowed, stream, capacity);
}

}  // namespace

namespace grove::capi {

grove::compiler::TensorList run_viewed(grove_model& model, grove::compiler::TensorList tensors,
                                       const std::vector<grove::runtime::StoragePtr>& borrowed,
                                       void* stream, size_t capacity) {
  require(model.output_count <= capacity, "the model returns ", model.output_count,
          " outputs but `outputs` holds ", capacity);
  const Device device = model.device;
  require(stream == nullptr || device.is_cuda(), "a stream was given but the model runs on ",
          device.str(), "; pass NULL (only cuda models run on a caller's stream)");
  CallerStream on_stream(device, stream);
  grove::compiler::TensorList results = (*model.compiled)(tensors);
  tensors.clear();
  if (!borrowed.empty()) detach_borrowed(model, borrowed);
  on_stream.finish();
  GROVE_CHECK(results.size() <= capacity, "the model returned ", results.size(),
              " outputs, more than the ", capacity, " it declared");
  return results;
}

void to_dlpack_all(const grove::compiler::TensorList& results, void** managed) {
  std::vector<DLManagedTensor*> made;
  made.reserve(results.size());
  try {
    for (const Tensor& result : results) made.push_back(to_dlpack(result));
  } catch (...) {
    for (DLManagedTensor* tensor : made) tensor->deleter(tensor);
    throw;
  }
  for (size_t i = 0; i < made.size(); ++i) managed[i] = made[i];
}

}  // namespace grove::capi

extern "C" {

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
    std::optional<grove::distributed::AllReduceOptions> all_reduce;
    backends::CompileOptions options = parse_options(options_json, &dims, &device, &all_reduce);
    grove::compiler::ir::Program program =
        grove::compiler::model_format::load_model(program_json, dims, device);
    if (all_reduce) {
      program = grove::distributed::add_gradient_all_reduce(program, *all_reduce);
    }
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

// Note [Destroying a model in use]
// Every entry point that takes a model holds a ModelCall (api_support.h) from
// its first look at the handle to its return, counted in calls_in_flight.
// grove_model_destroy sets `closing`, waits until no call is in flight, then
// deletes: a call in flight on another thread finishes on a live model, and a
// call that starts while the destroy waits is refused (InvalidArgument). The
// count and the flag are sequentially consistent atomics (no lock on the call
// path): a call increments and then reads the flag, the destroy sets the flag
// and then reads the count, so one of the two always sees the other. A call
// that starts after the destroy returned uses freed memory, as after free().
// Guarded by CApiThreads.DestroyWaitsForTheCallsInFlight
// (tests/capi/capi_threads_test.cc).
void grove_model_destroy(grove_model* model) {
  if (model == nullptr) return;
  // Note [The caller's current device stays as it was]: freeing its memory
  // and graphs works on the model's device.
  grove::runtime::CallerDeviceGuard caller_device;
  model->closing.store(true);
  for (int64_t calls = model->calls_in_flight.load(); calls != 0;
       calls = model->calls_in_flight.load()) {
    model->calls_in_flight.wait(calls);
  }
  try {
    delete model;
  } catch (...) {
    grove::capi::last_error() = "grove_model_destroy: an exception while destroying the model";
  }
}

grove_status grove_model_input_count(const grove_model* model, size_t* count) {
  return run_api("grove_model_input_count", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = ModelCall(model).model().input_names.size();
  });
}

grove_status grove_model_input_name(const grove_model* model, size_t index, const char** name) {
  return run_api("grove_model_input_name", [&] {
    require(name != nullptr, "the output pointer `name` is null");
    ModelCall call(model);
    const grove_model& checked_model = call.model();
    require(index < checked_model.input_names.size(), "input index ", index,
            " is out of range; the model has ", checked_model.input_names.size(), " inputs");
    *name = checked_model.input_names[index].c_str();
  });
}

grove_status grove_model_output_count(const grove_model* model, size_t* count) {
  return run_api("grove_model_output_count", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = ModelCall(model).model().output_count;
  });
}

grove_status grove_model_run(grove_model* model, const grove_tensor_desc* inputs,
                             size_t input_count, void* stream, grove_tensor** outputs,
                             size_t capacity, size_t* count) {
  size_t handed = 0;  // descriptions whose release grove owns
  grove_status status = run_api("grove_model_run", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = 0;
    ModelCall call(model);
    require(outputs != nullptr || capacity == 0, "capacity ", capacity,
            " but the outputs array is null");
    grove::compiler::TensorList results =
        run_model(call.model(), inputs, input_count, stream, capacity, &handed);
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

}  // extern "C"

namespace grove::capi {

grove_status run_dlpack(const char* api, grove_model* model, std::optional<uint64_t> invocation_key,
                        const grove_tensor_desc* inputs, size_t input_count, void* stream,
                        void** managed, uint64_t* keys, size_t capacity, size_t* count) {
  size_t handed = 0;
  grove_status status = run_api(api, [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = 0;
    ModelCall call(model);
    require(managed != nullptr || capacity == 0, "capacity ", capacity,
            " but the `managed` array is null");
    struct EndInvocation {
      bool begun = false;
      ~EndInvocation() {
        if (!begun) return;
        try {
          grove::cudagraph_trees::backend::end_invocation();
        } catch (...) {  // begun on this thread: end cannot fail
        }
      }
    } end_invocation;
    if (invocation_key) {
      grove::cudagraph_trees::backend::begin_invocation(*invocation_key);
      end_invocation.begun = true;
    }
    grove::compiler::TensorList results =
        run_model(call.model(), inputs, input_count, stream, capacity, &handed);
    grove::capi::to_dlpack_all(results, managed);
    if (keys != nullptr) {
      for (size_t i = 0; i < results.size(); ++i)
        keys[i] = call.model().output_keys.key_of(results[i]);
    }
    *count = results.size();
  });
  if (status != GROVE_OK) release_all(inputs, input_count, handed);
  return status;
}

}  // namespace grove::capi

extern "C" {

grove_status grove_model_run_dlpack(grove_model* model, const grove_tensor_desc* inputs,
                                    size_t input_count, void* stream, void** managed,
                                    size_t capacity, size_t* count) {
  return grove::capi::run_dlpack("grove_model_run_dlpack", model, std::nullopt, inputs, input_count,
                                 stream, managed, nullptr, capacity, count);
}

// Note [One C call per door call]: the torch door runs each graph call inside
// an invocation named by dynamo's generation (Note [Invocations of several
// models]); begin, run and end as one call saves the binding two foreign
// calls per graph call. The invocation ends whatever the run does.
grove_status grove_model_run_dlpack_invocation(grove_model* model, uint64_t invocation_key,
                                               const grove_tensor_desc* inputs, size_t input_count,
                                               void* stream, void** managed, size_t capacity,
                                               size_t* count) {
  return grove::capi::run_dlpack("grove_model_run_dlpack_invocation", model, invocation_key, inputs,
                                 input_count, stream, managed, nullptr, capacity, count);
}

grove_status grove_model_output_dtype(const grove_model* model, size_t index, int32_t* dtype) {
  return run_api("grove_model_output_dtype", [&] {
    require(dtype != nullptr, "the output pointer `dtype` is null");
    ModelCall call(model);
    const grove_model& checked_model = call.model();
    require(index < checked_model.output_dtypes.size(), "output index ", index,
            " is out of range; the model has ", checked_model.output_dtypes.size(), " outputs");
    *dtype = checked_model.output_dtypes[index];
  });
}

grove_status grove_model_borrowed_copies(const grove_model* model, int64_t* count) {
  return run_api("grove_model_borrowed_copies", [&] {
    require(count != nullptr, "the output pointer `count` is null");
    *count = ModelCall(model).model().borrowed_copies.load();
  });
}

}  // extern "C"

namespace {

// What grove_model_time_runs_split measures (Note [The launch clock]).
struct CallTimes {
  double host = 0;    // seconds per call to the call's return
  double launch = 0;  // seconds per call inside the platform's graph launches
  double wall = 0;    // seconds per call to the stream's synchronization
};

// Calls the model `calls` times from C++ on `inputs`; `idle`: the stream is
// synchronized (untimed) before each call, so each launch meets an idle device.
grove_status time_calls(const char* api, grove_model* model, const grove_tensor_desc* inputs,
                        size_t input_count, void* stream, int64_t calls, bool idle,
                        CallTimes* times) {
  size_t handed = 0;
  grove_status status = run_api(api, [&] {
    ModelCall call(model);
    const grove_model& checked_model = call.model();
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
    CallerStream on_stream(device, stream);
    const auto& compiled = *checked_model.compiled;
    grove::runtime::DeviceContext& context = grove::runtime::device_context(device);
    auto synchronize = [&] { context.platform().synchronize_stream(context.current_stream()); };
    using Clock = std::chrono::steady_clock;
    Clock::duration host{};
    grove::runtime::launch_clock::start();
    const Clock::time_point start = Clock::now();
    try {
      for (int64_t i = 0; i < calls; ++i) {
        if (idle) synchronize();
        const Clock::time_point begun = Clock::now();
        compiled(tensors);
        host += Clock::now() - begun;
      }
    } catch (...) {
      grove::runtime::launch_clock::stop();
      throw;
    }
    const int64_t launch_ns = grove::runtime::launch_clock::stop();
    synchronize();
    on_stream.finish();
    const double n = static_cast<double>(calls);
    times->host = std::chrono::duration<double>(host).count() / n;
    times->launch = static_cast<double>(launch_ns) * 1e-9 / n;
    times->wall = std::chrono::duration<double>(Clock::now() - start).count() / n;
  });
  if (status != GROVE_OK) release_all(inputs, input_count, handed);
  return status;
}

}  // namespace

extern "C" {

grove_status grove_model_time_runs(grove_model* model, const grove_tensor_desc* inputs,
                                   size_t input_count, void* stream, int64_t calls,
                                   double* seconds_per_call) {
  if (seconds_per_call == nullptr) {
    release_all(inputs, input_count, 0);
    return run_api("grove_model_time_runs",
                   [&] { require(false, "the output pointer `seconds_per_call` is null"); });
  }
  CallTimes times;
  grove_status status =
      time_calls("grove_model_time_runs", model, inputs, input_count, stream, calls, false, &times);
  if (status == GROVE_OK) *seconds_per_call = times.wall;
  return status;
}

grove_status grove_model_time_runs_split(grove_model* model, const grove_tensor_desc* inputs,
                                         size_t input_count, void* stream, int64_t calls, int idle,
                                         double* host_seconds, double* launch_seconds,
                                         double* wall_seconds) {
  if (host_seconds == nullptr || launch_seconds == nullptr || wall_seconds == nullptr) {
    release_all(inputs, input_count, 0);
    return run_api("grove_model_time_runs_split",
                   [&] { require(false, "an output pointer is null"); });
  }
  CallTimes times;
  grove_status status = time_calls("grove_model_time_runs_split", model, inputs, input_count,
                                   stream, calls, idle != 0, &times);
  if (status == GROVE_OK) {
    *host_seconds = times.host;
    *launch_seconds = times.launch;
    *wall_seconds = times.wall;
  }
  return status;
}

grove_status grove_model_state(const grove_model* model, const char* name, grove_tensor** tensor) {
  return run_api("grove_model_state", [&] {
    require(tensor != nullptr, "the output pointer `tensor` is null");
    require(name != nullptr, "the state name is null");
    *tensor = new grove_tensor{ModelCall(model).model().compiled->state(name)};
  });
}

grove_status grove_model_mark_step_begin(grove_model* model) {
  return run_api("grove_model_mark_step_begin",
                 [&] { ModelCall(model).model().compiled->mark_step_begin(); });
}

grove_status grove_model_stats_json(const grove_model* model, char** text) {
  return run_api("grove_model_stats_json", [&] {
    require(text != nullptr, "the output pointer `text` is null");
    *text = grove::capi::copy_string(
        grove::compiler::backends::stats_json(ModelCall(model).model().compiled->backend_stats())
            .dump());
  });
}

grove_status grove_model_dot(const grove_model* model, char** text) {
  return run_api("grove_model_dot", [&] {
    require(text != nullptr, "the output pointer `text` is null");
    *text = grove::capi::copy_string(ModelCall(model).model().compiled->backend_dot());
  });
}

}  // extern "C"
