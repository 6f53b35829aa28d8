#include "compiler/codegen/kernel_compiler.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/programmatic_ptx.h"
#include "runtime/compile_profile.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::compiler::codegen {
namespace {

// Note [Kernel cache]: generated code is PTX (cuda) or a host function (sim
// and cpu share it), a loaded handle belongs to one device; both are keyed by
// the spec's signature.
// One mutex guards the maps, but code is generated outside it (Note [Kernels
// generated side by side]): a signature being generated is in `generating`,
// and a second thread asking for it waits for the first one's result, so
// every kernel is still generated once.
struct KernelCache {
  std::mutex mutex;
  std::map<std::pair<std::string, bool>, runtime::KernelSource> sources;  // (signature, is PTX)
  std::map<std::pair<std::string, bool>, std::shared_future<runtime::KernelSource>> generating;
  std::map<std::pair<std::string, runtime::Device>, CompiledKernel> kernels;
  KernelCacheStats stats;
};

KernelCache& cache() {
  static KernelCache* instance = new KernelCache();
  return *instance;
}

runtime::KernelSource generate(const KernelSpec& spec, runtime::Device device, bool programmatic) {
  spec.verify();
  runtime::KernelSource generated;
  generated.name = kernel_symbol(spec);
  if (device.is_cuda()) {
    generated.ptx = emit_ptx(spec);
    if (programmatic) generated.ptx_programmatic = programmatic_ptx(generated.ptx);
  } else {
    generated.host_function = jit_host_kernel(spec);
  }
  return generated;
}

}  // namespace

CompiledKernel compile_kernel(const KernelSpec& spec, runtime::Device device) {
  runtime::DeviceContext& context = runtime::device_context(device);
  // Note [Programmatic generated kernels]: the form is part of the key, so
  // that one process can run both.
  const bool programmatic = device.is_cuda() && programmatic_generated_enabled();
  // Note [Rows held in registers]: so is the form of short-row reductions.
  const bool row_registers =
      device.is_cuda() && !spec.reductions.empty() && rows_in_registers_enabled();
  // Note [Short rows held by a warp]: and whether a warp holds them.
  const bool warp_held = device.is_cuda() && !spec.reductions.empty() && warp_held_rows_enabled();
  // Note [One barrier per block reduction]: and the block reductions' form.
  const bool one_barrier =
      device.is_cuda() && !spec.reductions.empty() && one_barrier_reduce_enabled();
  // Note [Elementwise kernels in aligned chunks]: and so is the elementwise form.
  const bool chunked = device.is_cuda() && spec.reductions.empty() && spec.part_sizes.empty() &&
                       chunked_elementwise_enabled();
  const std::string signature =
      spec.signature() + (programmatic ? "|programmatic" : "") + (chunked ? "|chunked" : "") +
      (row_registers ? "|rows_in_registers" : "") + (warp_held ? "|warp_held_rows" : "") +
      (one_barrier ? "|one_barrier" : "");
  KernelCache& state = cache();
  std::unique_lock<std::mutex> lock(state.mutex);
  auto found = state.kernels.find({signature, device});
  if (found != state.kernels.end()) {
    ++state.stats.hits;
    return found->second;
  }
  double compile_ms = 0;
  auto source_key = std::make_pair(signature, device.is_cuda());
  auto source = state.sources.find(source_key);
  if (source == state.sources.end()) {
    if (auto other = state.generating.find(source_key); other != state.generating.end()) {
      std::shared_future<runtime::KernelSource> pending = other->second;
      lock.unlock();
      runtime::KernelSource generated = pending.get();  // rethrows the other thread's error
      lock.lock();
      source = state.sources.emplace(source_key, std::move(generated)).first;
    } else {
      std::promise<runtime::KernelSource> promise;
      state.generating.emplace(source_key, promise.get_future().share());
      lock.unlock();
      auto start = std::chrono::steady_clock::now();
      runtime::KernelSource generated;
      try {
        generated = generate(spec, device, programmatic);
      } catch (...) {
        promise.set_exception(std::current_exception());
        lock.lock();
        state.generating.erase(source_key);
        throw;
      }
      compile_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      promise.set_value(generated);
      runtime::record_compile_event({"ptx", generated.name,
                                     generated.ptx_programmatic.empty()
                                         ? generated.ptx.size()
                                         : generated.ptx_programmatic.size(),
                                     compile_ms});
      if (log_enabled(LogLevel::kDebug)) {
        log(LogLevel::kDebug,
            str_cat("codegen: compiled kernel ", generated.name, " for ",
                    runtime::device_type_name(device.type), " in ", compile_ms, " ms"));
      }
      lock.lock();
      state.generating.erase(source_key);
      ++state.stats.code_generations;
      state.stats.total_compile_ms += compile_ms;
      source = state.sources.emplace(source_key, std::move(generated)).first;
    }
  }
  // A thread that waited for this generation may have loaded it meanwhile.
  if (auto done = state.kernels.find({signature, device}); done != state.kernels.end()) {
    return done->second;
  }
  CompiledKernel kernel;
  {
    runtime::CompileEventTimer timer("load call", source->second.name);
    kernel.handle = context.platform().load_kernel(source->second);
  }
  ++state.stats.loads;
  kernel.dims = kernel_launch_dims(spec, device.type);
  kernel.input_count = spec.inputs.size() * spec.part_count();
  kernel.output_count = spec.outputs.size() * spec.part_count();
  kernel.scalar_count = static_cast<size_t>(spec.scalar_count);
  if (spec.input_argument_count() != kernel.input_count ||
      spec.output_argument_count() != kernel.output_count) {
    kernel.parts = spec.part_count();
    for (const BufferSpec& input : spec.inputs) {
      kernel.shared_inputs.push_back(input.shared_by_parts);
    }
    for (const OutputSpec& output : spec.outputs) {
      kernel.in_place_outputs.push_back(output.in_place_input);
    }
  }
  kernel.name = source->second.name;
  kernel.device = device;
  kernel.compile_ms = compile_ms;
  state.kernels.emplace(std::make_pair(signature, device), kernel);
  return kernel;
}

// Note [Kernels generated side by side]: LLVM's PTX for one of the small-M
// GEMM's candidates takes 15-110 ms (session 23 r1, gpt4x256's cold compile:
// 1.0 s of code generation, most of it the tuning's 24 candidates, one after
// another). emit_ptx builds its own LLVMContext and target machine, so
// candidates are generated on threads of their own, and the kernel cache
// generates each signature once (Note [Kernel cache]). The code is the same.
// GROVE_PARALLEL_CODEGEN=0 generates them one after another (the old path).
// Test: KernelCompiler.KernelsCompiledSideBySideMatchOneAfterAnother.
std::vector<CompiledKernel> compile_kernels(const std::vector<const KernelSpec*>& specs,
                                            runtime::Device device) {
  const char* value = std::getenv("GROVE_PARALLEL_CODEGEN");
  const bool side_by_side =
      specs.size() > 1 && !(value != nullptr && std::string_view(value) == "0");
  std::vector<CompiledKernel> kernels;
  if (!side_by_side) {
    for (const KernelSpec* spec : specs) kernels.push_back(compile_kernel(*spec, device));
    return kernels;
  }
  std::vector<std::future<CompiledKernel>> compiling;
  for (const KernelSpec* spec : specs) {
    compiling.push_back(
        std::async(std::launch::async, [spec, device] { return compile_kernel(*spec, device); }));
  }
  std::exception_ptr first_error;
  for (std::future<CompiledKernel>& kernel : compiling) {
    try {
      kernels.push_back(kernel.get());
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  return kernels;
}

namespace {

// Note [Multi-part kernel arguments] (kernel_spec.h): shared inputs once, then
// each part's other inputs, then each part's outputs that are not in place.
void add_part_pointers(const CompiledKernel& kernel, const std::vector<const void*>& inputs,
                       const std::vector<void*>& outputs, runtime::KernelArgs& args) {
  const size_t per_part_inputs = kernel.shared_inputs.size();
  const size_t per_part_outputs = kernel.in_place_outputs.size();
  for (size_t i = 0; i < per_part_inputs; ++i) {
    if (!kernel.shared_inputs[i]) {
      continue;
    }
    for (size_t p = 1; p < kernel.parts; ++p) {
      GROVE_CHECK(inputs[p * per_part_inputs + i] == inputs[i], "kernel '", kernel.name,
                  "': input ", i, " is shared by every part, but part ", p,
                  " passes another pointer than part 0 (a grove bug in horizontal fusion; "
                  "GROVE_HORIZONTAL_FUSION=0 avoids it)");
    }
    args.add_pointer(inputs[i]);
  }
  for (size_t p = 0; p < kernel.parts; ++p) {
    for (size_t i = 0; i < per_part_inputs; ++i) {
      if (!kernel.shared_inputs[i]) {
        args.add_pointer(inputs[p * per_part_inputs + i]);
      }
    }
  }
  for (size_t p = 0; p < kernel.parts; ++p) {
    for (size_t o = 0; o < per_part_outputs; ++o) {
      void* output = outputs[p * per_part_outputs + o];
      const int input = kernel.in_place_outputs[o];
      if (input < 0) {
        args.add_pointer(output);
        continue;
      }
      GROVE_CHECK(output == inputs[p * per_part_inputs + static_cast<size_t>(input)], "kernel '",
                  kernel.name, "': output ", o, " of part ", p,
                  " is written in place through input ", input,
                  ", but its pointer differs (a grove bug in horizontal fusion; "
                  "GROVE_HORIZONTAL_FUSION=0 avoids it)");
    }
  }
}

}  // namespace

runtime::KernelArgs make_args(const CompiledKernel& kernel, const std::vector<const void*>& inputs,
                              const std::vector<void*>& outputs,
                              const std::vector<float>& scalars) {
  GROVE_CHECK(inputs.size() == kernel.input_count && outputs.size() == kernel.output_count &&
                  scalars.size() == kernel.scalar_count,
              "kernel '", kernel.name, "': expected ", kernel.input_count, " inputs, ",
              kernel.output_count, " outputs and ", kernel.scalar_count, " scalars, found ",
              inputs.size(), ", ", outputs.size(), " and ", scalars.size(),
              "; pass the buffers the kernel's spec declares, in order");
  runtime::KernelArgs args;
  args.slots.reserve(inputs.size() + outputs.size() + scalars.size());
  if (kernel.shared_inputs.empty()) {
    for (const void* input : inputs) {
      args.add_pointer(input);
    }
    for (void* output : outputs) {
      args.add_pointer(output);
    }
  } else {
    add_part_pointers(kernel, inputs, outputs, args);
  }
  for (float scalar : scalars) args.add_f32(scalar);
  return args;
}

void launch(const CompiledKernel& kernel, const std::vector<const void*>& inputs,
            const std::vector<void*>& outputs, const std::vector<float>& scalars,
            runtime::StreamHandle stream) {
  GROVE_CHECK(static_cast<bool>(kernel.handle), "launch of kernel '", kernel.name,
              "': the kernel was never loaded; get it from compile_kernel()");
  runtime::KernelArgs args = make_args(kernel, inputs, outputs, scalars);
  runtime::device_context(kernel.device)
      .platform()
      .launch_kernel(kernel.handle, kernel.dims, args, stream);
}

void launch(const CompiledKernel& kernel, const std::vector<runtime::Tensor>& inputs,
            const std::vector<runtime::Tensor>& outputs, const std::vector<float>& scalars) {
  auto check_device = [&](const runtime::Tensor& tensor, const char* role, size_t index) {
    GROVE_CHECK_AS(DeviceError, tensor.defined() && tensor.device() == kernel.device, "kernel '",
                   kernel.name, "': ", role, " ", index, " must be a tensor on ", kernel.device,
                   ", found ",
                   tensor.defined() ? tensor.str() : std::string("an undefined tensor"));
  };
  std::vector<const void*> input_pointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_device(inputs[i], "input", i);
    input_pointers.push_back(inputs[i].data_ptr());
  }
  std::vector<void*> output_pointers;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_device(outputs[i], "output", i);
    output_pointers.push_back(outputs[i].data_ptr());
  }
  runtime::StreamHandle stream = runtime::device_context(kernel.device).current_stream();
  launch(kernel, input_pointers, output_pointers, scalars, stream);
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().stats;
}

void clear_kernel_cache() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  cache().sources.clear();
  cache().kernels.clear();
}

}  // namespace grove::compiler::codegen
