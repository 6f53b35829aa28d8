// Code generation entry points below the kernel cache: the symbol, launch
// geometry, LLVM IR, PTX and host function of one KernelSpec. Most callers
// want compile_kernel (kernel_compiler.h), which caches these per signature.
// No LLVM header is visible here.
#pragma once

#include <string>

#include "compiler/codegen/kernel_spec.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::compiler::codegen {

struct CodegenOptions {
  // Host kernels call the C library's expf/logf/tanhf/powf by default; with
  // portable_math they use the same polynomial code as the PTX (Note [Portable
  // kernel math] in kernel_math.h), which lets tests check the device numerics
  // on a machine without a GPU.
  bool portable_math = false;
};

// A kernel's symbol: its name plus a hash of its signature ("fused_add_3f2a9c81d0e4").
std::string kernel_symbol(const KernelSpec& spec);

// Note [Kernel launch geometry]: on cuda an elementwise kernel runs 256-thread
// blocks in a grid-stride loop, each thread taking 4 elements per iteration,
// a grid apart or one aligned chunk (Note [Unrolled elementwise kernels], Note
// [Elementwise kernels in aligned chunks]; grid = min(ceil(n / 1024), 4096), at least 1); a
// reduction kernel runs one block per row (grid-stride over rows, grid <=
// 65535) whose size is the row length rounded up to a power of two, clamped to
// [32, 256]; with warp_rows (Note [Warp-per-row reductions] in kernel_spec.h),
// and for rows of at most 32 elements (Note [Short rows held by a warp]),
// 128-thread blocks reduce 4 rows each (grid-stride, grid <= 65535). Host
// kernels ignore the dims (1x1).
runtime::LaunchDims kernel_launch_dims(const KernelSpec& spec, runtime::DeviceType device_type);

// Whether reductions over rows no longer than their block hold each thread's
// element in registers (Note [Rows held in registers]): GROVE_ROWS_IN_REGISTERS,
// on unless 0.
bool rows_in_registers_enabled();

// Whether reductions over rows of at most 32 elements run a warp per row, 4
// rows per block (Note [Short rows held by a warp] in kernel_emitter_reduction.cc):
// GROVE_WARP_HELD_ROWS, on unless 0 (0 keeps a block per row).
bool warp_held_rows_enabled();

// Whether block reductions of kernels with an even number of reductions wait
// at one barrier instead of two (Note [One barrier per block reduction] in
// kernel_emitter_reduction.cc): GROVE_ONE_BARRIER_REDUCE=1 (off by default).
bool one_barrier_reduce_enabled();

// Whether elementwise kernels run aligned chunks of consecutive elements where
// they can (Note [Elementwise kernels in aligned chunks] in kernel_emitter.cc):
// GROVE_CHUNKED_ELEMENTWISE, on unless 0.
bool chunked_elementwise_enabled();

// Textual LLVM IR of the kernel for `device_type` (cuda: NVPTX; sim/cpu: host),
// after the O2 pipeline when `optimized`.
std::string emit_llvm_ir(const KernelSpec& spec, runtime::DeviceType device_type,
                         bool optimized = true, const CodegenOptions& options = {});

// PTX text (nvptx64-nvidia-cuda, sm_80, PTX 7.5) whose .entry is kernel_symbol(spec).
std::string emit_ptx(const KernelSpec& spec);

// JIT-compiles the host version of `spec` into the process-wide ORC JIT. The
// function lives as long as the process. Thread-safe.
runtime::HostKernelFn jit_host_kernel(const KernelSpec& spec, const CodegenOptions& options = {});

}  // namespace grove::compiler::codegen
