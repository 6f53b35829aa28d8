// compile_kernel turns a KernelSpec into a kernel loaded on a device, through
// a process-wide cache keyed by signature for the generated code (PTX for
// cuda; one host function shared by sim and cpu) and by (signature, device)
// for the loaded handle. launch() binds arguments per Note [Kernel ABI] (kernel_spec.h) and
// enqueues through the device's Platform. No LLVM header is visible here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_spec.h"
#include "runtime/device.h"
#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::compiler::codegen {

struct CompiledKernel {
  runtime::KernelHandle handle;
  runtime::LaunchDims dims;  // Note [Kernel launch geometry] (codegen.h)
  // Pointers callers pass: one per spec input (output) of every part.
  size_t input_count = 0;
  size_t output_count = 0;
  size_t scalar_count = 0;
  // Multi-part kernels (Note [Multi-part kernel arguments], kernel_spec.h):
  // the part count, per spec input whether it is shared by parts, and per
  // spec output the input it is written in place through (-1: none). Empty
  // when the kernel passes every pointer.
  size_t parts = 1;
  std::vector<bool> shared_inputs;
  std::vector<int> in_place_outputs;
  std::string name;  // the kernel's symbol (kernel_symbol(spec))
  runtime::Device device;
  // Time spent generating this kernel's code, in milliseconds, when it was first compiled.
  double compile_ms = 0;
};

// The kernel for `spec` on `device`, compiled on first use (the spec is
// verified then) and cached. Throws DeviceError when the device is absent.
// Thread-safe.
CompiledKernel compile_kernel(const KernelSpec& spec, runtime::Device device);

// compile_kernel of each spec, in order, the code generated side by side
// (Note [Kernels generated side by side]); throws the first error.
std::vector<CompiledKernel> compile_kernels(const std::vector<const KernelSpec*>& specs,
                                            runtime::Device device);

// Argument slots in ABI order; throws grove::Error when a count does not match
// the kernel, or when a pointer a multi-part kernel takes once differs between
// its parts (Note [Multi-part kernel arguments]).
runtime::KernelArgs make_args(const CompiledKernel& kernel, const std::vector<const void*>& inputs,
                              const std::vector<void*>& outputs, const std::vector<float>& scalars);

// Enqueues the kernel on `stream` of its device.
void launch(const CompiledKernel& kernel, const std::vector<const void*>& inputs,
            const std::vector<void*>& outputs, const std::vector<float>& scalars,
            runtime::StreamHandle stream);

// Enqueues the kernel on its device's current stream with the tensors' element-0
// addresses; every tensor must live on the kernel's device (DeviceError otherwise).
// Shapes and strides are the caller's business: they were baked into the spec.
void launch(const CompiledKernel& kernel, const std::vector<runtime::Tensor>& inputs,
            const std::vector<runtime::Tensor>& outputs, const std::vector<float>& scalars = {});

struct KernelCacheStats {
  uint64_t hits = 0;              // compile_kernel calls answered from the cache
  uint64_t code_generations = 0;  // PTX / host functions generated
  uint64_t loads = 0;             // Platform::load_kernel calls
  double total_compile_ms = 0;    // time spent generating code
};

KernelCacheStats kernel_cache_stats();
// Forgets the cached handles and code (loaded kernels stay valid; the next
// compile_kernel generates and loads again). For tests and benchmarks.
void clear_kernel_cache();

}  // namespace grove::compiler::codegen
