// MathEmitter emits the f32 transcendental functions of generated kernels into
// an LLVM module: either calls to the C library (host JIT, resolved from the
// process) or self-contained polynomial code that needs no libdevice (NVPTX,
// and the host when asked to mirror the device's numerics).
//
// Note [Portable kernel math]: exp reduces x = n ln2 + r (Cody-Waite, |r| <=
// ln2/2), evaluates a degree-7 Taylor polynomial and scales by 2^n in two
// exact steps; log splits x = m 2^e with m in [sqrt(1/2), sqrt(2)) and uses
// the atanh series of (m-1)/(m+1); tanh uses its odd Taylor series below 0.4
// and 1 - 2/(exp(2|x|)+1) above; pow is exp(y log|x|) with C's special cases
// for zeros, negative bases with integral exponents, y == 0 and x == 1. All are
// branch-free (selects), within a few f32 ulps of the C library except pow,
// whose error grows with |y log x| (about 1e-6 relative for |y log x| < 10).
//
// Note [Erf as one expression]: the op erf (PyTorch's exact gelu is
// 0.5 x (1 + erf(x / sqrt 2))) is Abramowitz and Stegun 7.1.26, |error| <
// 1.5e-7: erf(|x|) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-x^2),
// t = 1 / (1 + p |x|), erf odd. Written out as exprs (GROVE_FAST_ERF=0) a
// cuda kernel pays an IEEE division (rcp.rn.f32 and its slow path) and the
// portable exp (range reduction, a degree-7 polynomial, two scalings) per
// element, about 55 instructions: for MLP-Mixer b16's token-mixing gelu over
// 2 M elements about 4 us of issue on an H100 by that count (session 21 timed
// the kernel at 6.9 us, Inductor's at 5.1). As one expr (kErf), cuda evaluates the same formula
// with the hardware's approximate reciprocal (div.approx.ftz) and exp2 (ex2.approx.ftz) and fused
// multiply-adds, about 15 instructions, within 1e-6 of the written-out form; the host evaluates the
// written-out form's operations in its order (the C library's or the portable exp), so sim's
// results are unchanged. Session 22 r2 (H200, one process each): MLP-Mixer b16 653.3 us per call
// against 677.8 written out (its token-mixing gelu 3.9 us against 5.8, Inductor's 5.0), ViT b16
// 574.0 against 587.9 (its gelu 1.44 us against 1.81). Tests:
// OpLowering.ErfAsOneExpressionMatchesTheWrittenOutForm (host, bitwise),
// CudaExecution.KernelsOnCudaMatchTheHostKernels (cuda against the host). Internal header of
// //compiler/codegen: includes LLVM.
#pragma once

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace grove::compiler::codegen {

class MathEmitter {
 public:
  // `portable`: emit Note [Portable kernel math] code instead of C library calls;
  // `nvptx`: the module is a cuda kernel's (Note [Erf as one expression]).
  MathEmitter(llvm::Module& module, bool portable, bool nvptx = false)
      : module_(module), portable_(portable), nvptx_(nvptx) {}

  llvm::Value* exp(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* log(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* tanh(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);
  llvm::Value* sigmoid(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* gelu(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* sqrt(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* rsqrt(llvm::IRBuilder<>& b, llvm::Value* x);
  llvm::Value* erf(llvm::IRBuilder<>& b, llvm::Value* x);

 private:
  // The module's function `name` of `arity` f32 arguments: a C library
  // declaration, or (portable) an internal always-inline definition built by `define`.
  llvm::Function* function(const char* name, int arity, bool define_portable);
  void define_exp(llvm::Function* function);
  void define_log(llvm::Function* function);
  void define_tanh(llvm::Function* function);
  void define_pow(llvm::Function* function);

  llvm::Module& module_;
  bool portable_;
  bool nvptx_;
};

}  // namespace grove::compiler::codegen
