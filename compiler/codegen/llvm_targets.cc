// The LLVM code generation targets behind codegen.h: the O2 pipeline, PTX
// emission for NVPTX, and the process-wide ORC JIT that turns host modules
// into HostKernelFn (the host target of sim and cpu).
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/jit_arena.h"
#include "compiler/codegen/kernel_emitter.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

// f16 conversions for host kernels (x86 has no portable half instructions);
// the JIT binds these names to these functions.
extern "C" float grove_f16_bits_to_float(uint16_t bits) {
  return grove::runtime::f16_bits_to_float(bits);
}
extern "C" uint16_t grove_float_to_f16_bits(float value) {
  return grove::runtime::float_to_f16_bits(value);
}

namespace grove::compiler::codegen {
namespace {

constexpr const char* kNvptxTriple = "nvptx64-nvidia-cuda";
constexpr const char* kNvptxCpu = "sm_80";
constexpr const char* kNvptxFeatures = "+ptx75";

std::string llvm_error_text(llvm::Error error) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << error;
  return stream.str();
}

void initialize_targets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

std::unique_ptr<llvm::TargetMachine> nvptx_target_machine() {
  initialize_targets();
  std::string problem;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kNvptxTriple, problem);
  GROVE_CHECK(target != nullptr, "codegen: the NVPTX target is not linked into this binary (",
              problem, "); link //compiler/codegen with @llvm//:llvm");
  return std::unique_ptr<llvm::TargetMachine>(
      target->createTargetMachine(kNvptxTriple, kNvptxCpu, kNvptxFeatures, llvm::TargetOptions(),
                                  llvm::None, llvm::None, llvm::CodeGenOpt::Aggressive));
}

void optimize(llvm::Module& module, llvm::TargetMachine* target_machine) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(target_machine);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  llvm::ModulePassManager pipeline =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  pipeline.run(module, modules);
}

// Note [One host JIT]: one LLJIT serves the whole process; a mutex serialises
// adding modules and looking up symbols (IR is built outside it, in a context
// per kernel). Symbols get a sequence number so a kernel compiled twice (say
// with and without portable math) never clashes.
class HostJit {
 public:
  static HostJit& instance() {
    static HostJit* jit = new HostJit();  // never destroyed: kernels outlive static destructors
    return *jit;
  }

  llvm::TargetMachine& target_machine() { return *target_machine_; }
  const llvm::DataLayout& data_layout() const { return jit_->getDataLayout(); }
  std::string unique_symbol(const std::string& base) {
    return base + "_h" + std::to_string(sequence_.fetch_add(1));
  }

  void optimize_module(llvm::Module& module) {
    std::lock_guard<std::mutex> lock(mutex_);
    optimize(module, target_machine_.get());
  }

  runtime::HostKernelFn add(std::unique_ptr<llvm::Module> module,
                            std::unique_ptr<llvm::LLVMContext> context, const std::string& symbol) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The target machine is shared, so the O2 pipeline runs under the lock too.
    optimize(*module, target_machine_.get());
    llvm::orc::ThreadSafeModule safe_module(std::move(module), std::move(context));
    if (llvm::Error error = jit_->addIRModule(std::move(safe_module))) {
      throw Error(str_cat("codegen: the host JIT rejected kernel '", symbol,
                          "': ", llvm_error_text(std::move(error))));
    }
    auto found = jit_->lookup(symbol);
    if (!found) {
      throw Error(str_cat("codegen: the host JIT could not materialize kernel '", symbol,
                          "': ", llvm_error_text(found.takeError())));
    }
    return reinterpret_cast<runtime::HostKernelFn>(found->getAddress());
  }

 private:
  HostJit() {
    initialize_targets();
    auto machine_builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    GROVE_CHECK(static_cast<bool>(machine_builder),
                "codegen: cannot describe the host CPU for the JIT: ",
                llvm_error_text(machine_builder.takeError()));
    machine_builder->setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    auto machine = machine_builder->createTargetMachine();
    GROVE_CHECK(static_cast<bool>(machine), "codegen: cannot create the host target machine: ",
                llvm_error_text(machine.takeError()));
    target_machine_ = std::move(*machine);
    // Note [JIT memory in arenas] (jit_arena.h).
    JitArena* arena = arena_.get();
    auto jit =
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(*machine_builder)
            .setObjectLinkingLayerCreator(
                [arena](llvm::orc::ExecutionSession& session, const llvm::Triple&)
                    -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
                  return std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(session, [arena] {
                    return std::make_unique<llvm::SectionMemoryManager>(arena);
                  });
                })
            .create();
    GROVE_CHECK(static_cast<bool>(jit),
                "codegen: cannot create the host JIT: ", llvm_error_text(jit.takeError()));
    jit_ = std::move(*jit);
    llvm::orc::JITDylib& library = jit_->getMainJITDylib();
    // The C library's math and grove's helpers are bound explicitly, so they
    // resolve even when the binary was linked with --as-needed.
    llvm::orc::SymbolMap symbols;
    auto bind = [&](const char* name, auto* address) {
      symbols[jit_->mangleAndIntern(name)] = llvm::JITEvaluatedSymbol(
          llvm::pointerToJITTargetAddress(address), llvm::JITSymbolFlags::Exported);
    };
    bind("expf", static_cast<float (*)(float)>(&::expf));
    bind("logf", static_cast<float (*)(float)>(&::logf));
    bind("tanhf", static_cast<float (*)(float)>(&::tanhf));
    bind("powf", static_cast<float (*)(float, float)>(&::powf));
    bind("fmaf", static_cast<float (*)(float, float, float)>(&::fmaf));
    bind("rintf", static_cast<float (*)(float)>(&::rintf));
    bind("sqrtf", static_cast<float (*)(float)>(&::sqrtf));
    bind("grove_f16_bits_to_float", &grove_f16_bits_to_float);
    bind("grove_float_to_f16_bits", &grove_float_to_f16_bits);
    llvm::cantFail(library.define(llvm::orc::absoluteSymbols(std::move(symbols))));
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        jit_->getDataLayout().getGlobalPrefix());
    if (process) library.addGenerator(std::move(*process));
  }

  std::mutex mutex_;
  std::atomic<uint64_t> sequence_{0};
  std::unique_ptr<JitArena> arena_ = std::make_unique<JitArena>();  // outlives jit_
  std::unique_ptr<llvm::TargetMachine> target_machine_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

std::string module_text(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return stream.str();
}

}  // namespace

std::string kernel_symbol(const KernelSpec& spec) {
  // FNV-1a over the signature: stable across runs and processes.
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : spec.signature()) hash = (hash ^ c) * 1099511628211ull;
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), "_%012llx",
                static_cast<unsigned long long>(hash & 0xffffffffffffull));
  return spec.name + suffix;
}

std::string emit_llvm_ir(const KernelSpec& spec, runtime::DeviceType device_type, bool optimized,
                         const CodegenOptions& options) {
  spec.verify();
  llvm::LLVMContext context;
  EmitOptions emit_options;
  emit_options.portable_math = options.portable_math;
  std::unique_ptr<llvm::TargetMachine> nvptx;
  llvm::TargetMachine* machine = nullptr;
  if (device_type == runtime::DeviceType::kCuda) {
    emit_options.target = EmitTarget::kNvptx;
    nvptx = nvptx_target_machine();
    machine = nvptx.get();
  } else {
    machine = &HostJit::instance().target_machine();
  }
  auto module = emit_kernel_module(spec, kernel_symbol(spec), emit_options, context);
  module->setTargetTriple(machine->getTargetTriple().str());
  module->setDataLayout(machine->createDataLayout());
  if (optimized && nvptx) optimize(*module, machine);
  if (optimized && !nvptx) HostJit::instance().optimize_module(*module);
  return module_text(*module);
}

std::string emit_ptx(const KernelSpec& spec) {
  spec.verify();
  llvm::LLVMContext context;
  EmitOptions options;
  options.target = EmitTarget::kNvptx;
  auto module = emit_kernel_module(spec, kernel_symbol(spec), options, context);
  std::unique_ptr<llvm::TargetMachine> machine = nvptx_target_machine();
  module->setTargetTriple(kNvptxTriple);
  module->setDataLayout(machine->createDataLayout());
  optimize(*module, machine.get());
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream stream(ptx);
  llvm::legacy::PassManager passes;
  GROVE_CHECK(!machine->addPassesToEmitFile(passes, stream, nullptr, llvm::CGFT_AssemblyFile),
              "codegen: the NVPTX target cannot emit PTX for kernel '", spec.name, "'");
  passes.run(*module);
  return std::string(ptx.str());
}

runtime::HostKernelFn jit_host_kernel(const KernelSpec& spec, const CodegenOptions& options) {
  spec.verify();
  HostJit& jit = HostJit::instance();
  auto context = std::make_unique<llvm::LLVMContext>();
  EmitOptions emit_options;
  emit_options.portable_math = options.portable_math;
  const std::string symbol = jit.unique_symbol(kernel_symbol(spec));
  auto module = emit_kernel_module(spec, symbol, emit_options, *context);
  module->setTargetTriple(jit.target_machine().getTargetTriple().str());
  module->setDataLayout(jit.data_layout());
  return jit.add(std::move(module), std::move(context), symbol);
}

}  // namespace grove::compiler::codegen
