// The LLVM IR of one kernel: builds the function described by a KernelSpec,
// with the argument ABI of Note [Kernel ABI] (kernel_spec.h), either as a PTX
// kernel entry (one thread per element / one block per row) or as a host
// function that loops over the whole iteration space.
// Internal header of //compiler/codegen: includes LLVM.
#pragma once

#include <memory>
#include <string>

#include "compiler/codegen/kernel_spec.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace grove::compiler::codegen {

enum class EmitTarget { kHost, kNvptx };

struct EmitOptions {
  EmitTarget target = EmitTarget::kHost;
  // Host only: use Note [Portable kernel math] instead of the C library (NVPTX always does).
  bool portable_math = false;
};

// A module holding the external function `symbol` for `spec`, which must verify().
std::unique_ptr<llvm::Module> emit_kernel_module(const KernelSpec& spec, const std::string& symbol,
                                                 const EmitOptions& options,
                                                 llvm::LLVMContext& context);

}  // namespace grove::compiler::codegen
