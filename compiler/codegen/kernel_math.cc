#include "compiler/codegen/kernel_math.h"

#include <cmath>
#include <string>
#include <vector>

#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace grove::compiler::codegen {
namespace {

llvm::Value* f32(llvm::IRBuilder<>& b, double value) {
  return llvm::ConstantFP::get(b.getFloatTy(), value);
}

llvm::Value* i32(llvm::IRBuilder<>& b, int64_t value) {
  return b.getInt32(static_cast<uint32_t>(value));
}

llvm::Value* unary_intrinsic(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id, llvm::Value* x) {
  return b.CreateUnaryIntrinsic(id, x);
}

llvm::Value* fma(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y, llvm::Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {b.getFloatTy()}, {x, y, z});
}

// c[0] + x (c[1] + x (c[2] + ...)), Horner's scheme with fused multiply-adds.
llvm::Value* horner(llvm::IRBuilder<>& b, llvm::Value* x,
                    std::initializer_list<double> coefficients) {
  std::vector<double> c(coefficients);
  llvm::Value* result = f32(b, c.back());
  for (size_t i = c.size() - 1; i-- > 0;) result = fma(b, result, x, f32(b, c[i]));
  return result;
}

// 2^n for an i32 n in [-126, 127], built from the exponent bits.
llvm::Value* exp2_int(llvm::IRBuilder<>& b, llvm::Value* n) {
  llvm::Value* bits = b.CreateShl(b.CreateAdd(n, i32(b, 127)), 23);
  return b.CreateBitCast(bits, b.getFloatTy());
}

llvm::Value* is_nan(llvm::IRBuilder<>& b, llvm::Value* x) { return b.CreateFCmpUNO(x, x); }

}  // namespace

llvm::Function* MathEmitter::function(const char* name, int arity, bool define_portable) {
  llvm::LLVMContext& context = module_.getContext();
  std::string symbol = define_portable ? std::string("grove_portable_") + name : name;
  if (llvm::Function* existing = module_.getFunction(symbol)) return existing;
  std::vector<llvm::Type*> parameters(arity, llvm::Type::getFloatTy(context));
  auto* type = llvm::FunctionType::get(llvm::Type::getFloatTy(context), parameters, false);
  auto linkage =
      define_portable ? llvm::Function::InternalLinkage : llvm::Function::ExternalLinkage;
  llvm::Function* created = llvm::Function::Create(type, linkage, symbol, module_);
  created->addFnAttr(llvm::Attribute::NoUnwind);
  created->addFnAttr(llvm::Attribute::ReadNone);
  created->addFnAttr(llvm::Attribute::WillReturn);
  if (!define_portable) return created;
  created->addFnAttr(llvm::Attribute::AlwaysInline);
  const std::string which = name;
  if (which == "expf") define_exp(created);
  if (which == "logf") define_log(created);
  if (which == "tanhf") define_tanh(created);
  if (which == "powf") define_pow(created);
  return created;
}

void MathEmitter::define_exp(llvm::Function* fn) {
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module_.getContext(), "entry", fn));
  llvm::Value* x = fn->getArg(0);
  // Clamping keeps n in [-150, 128], so both halves of 2^n are normal numbers;
  // beyond the clamp the result already overflows to inf or underflows to 0.
  llvm::Value* clamped = b.CreateMinNum(b.CreateMaxNum(x, f32(b, -104.0)), f32(b, 89.0));
  llvm::Value* n =
      unary_intrinsic(b, llvm::Intrinsic::rint, b.CreateFMul(clamped, f32(b, 1.4426950408889634)));
  llvm::Value* minus_n = b.CreateFNeg(n);
  llvm::Value* r =
      fma(b, minus_n, f32(b, 0.693145751953125), clamped);  // ln2 high bits: exact product
  r = fma(b, minus_n, f32(b, 1.428606765330187045e-06), r);
  llvm::Value* p =
      horner(b, r, {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040});
  llvm::Value* n_int = b.CreateFPToSI(n, b.getInt32Ty());
  llvm::Value* half = b.CreateAShr(n_int, 1);
  llvm::Value* scaled =
      b.CreateFMul(b.CreateFMul(p, exp2_int(b, half)), exp2_int(b, b.CreateSub(n_int, half)));
  b.CreateRet(b.CreateSelect(is_nan(b, x), x, scaled));
}

void MathEmitter::define_log(llvm::Function* fn) {
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module_.getContext(), "entry", fn));
  llvm::Value* x = fn->getArg(0);
  // Subnormal inputs are scaled into the normal range first.
  llvm::Value* subnormal = b.CreateFCmpOLT(x, f32(b, 1.17549435e-38));
  llvm::Value* normal_x = b.CreateSelect(subnormal, b.CreateFMul(x, f32(b, 8388608.0)), x);
  llvm::Value* exponent_bias = b.CreateSelect(subnormal, i32(b, -150), i32(b, -127));
  llvm::Value* bits = b.CreateBitCast(normal_x, b.getInt32Ty());
  llvm::Value* e = b.CreateAdd(b.CreateLShr(bits, 23), exponent_bias);
  llvm::Value* mantissa_bits = b.CreateOr(b.CreateAnd(bits, i32(b, 0x7fffff)), i32(b, 0x3f800000));
  llvm::Value* m = b.CreateBitCast(mantissa_bits, b.getFloatTy());
  llvm::Value* above_sqrt2 = b.CreateFCmpOGT(m, f32(b, 1.41421356237));
  m = b.CreateSelect(above_sqrt2, b.CreateFMul(m, f32(b, 0.5)), m);
  e = b.CreateSelect(above_sqrt2, b.CreateAdd(e, i32(b, 1)), e);
  llvm::Value* f = b.CreateFDiv(b.CreateFSub(m, f32(b, 1.0)), b.CreateFAdd(m, f32(b, 1.0)));
  llvm::Value* two_f = b.CreateFMul(f, f32(b, 2.0));
  llvm::Value* s = b.CreateFMul(f, f);
  llvm::Value* series =
      b.CreateFMul(s, horner(b, s, {1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13}));
  llvm::Value* log_m = fma(b, two_f, series, two_f);
  llvm::Value* e_float = b.CreateSIToFP(e, b.getFloatTy());
  llvm::Value* result = fma(b, e_float, f32(b, 0.693145751953125),
                            fma(b, e_float, f32(b, 1.428606765330187045e-06), log_m));
  auto* inf = f32(b, INFINITY);
  result = b.CreateSelect(b.CreateFCmpOEQ(x, inf), inf, result);
  result = b.CreateSelect(b.CreateFCmpOEQ(x, f32(b, 0.0)), f32(b, -INFINITY), result);
  // x < 0 and NaN give NaN.
  result = b.CreateSelect(b.CreateFCmpULT(x, f32(b, 0.0)), f32(b, NAN), result);
  b.CreateRet(result);
}

void MathEmitter::define_tanh(llvm::Function* fn) {
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module_.getContext(), "entry", fn));
  llvm::Value* x = fn->getArg(0);
  llvm::Value* magnitude = unary_intrinsic(b, llvm::Intrinsic::fabs, x);
  llvm::Value* x2 = b.CreateFMul(x, x);
  llvm::Value* series = horner(
      b, x2, {-1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925, 21844.0 / 6081075});
  llvm::Value* small = fma(b, b.CreateFMul(x, x2), series, x);
  llvm::Value* e = b.CreateCall(function("expf", 1, true), {b.CreateFMul(magnitude, f32(b, 2.0))});
  llvm::Value* large =
      b.CreateFSub(f32(b, 1.0), b.CreateFDiv(f32(b, 2.0), b.CreateFAdd(e, f32(b, 1.0))));
  large = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, large, x);
  b.CreateRet(b.CreateSelect(b.CreateFCmpOLT(magnitude, f32(b, 0.4)), small, large));
}

void MathEmitter::define_pow(llvm::Function* fn) {
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module_.getContext(), "entry", fn));
  llvm::Value* x = fn->getArg(0);
  llvm::Value* y = fn->getArg(1);
  llvm::Value* magnitude = unary_intrinsic(b, llvm::Intrinsic::fabs, x);
  llvm::Value* log_x = b.CreateCall(function("logf", 1, true), {magnitude});
  llvm::Value* result = b.CreateCall(function("expf", 1, true), {b.CreateFMul(y, log_x)});
  llvm::Value* y_integral = b.CreateFCmpOEQ(unary_intrinsic(b, llvm::Intrinsic::rint, y), y);
  llvm::Value* half_y = b.CreateFMul(y, f32(b, 0.5));
  llvm::Value* y_odd = b.CreateAnd(
      y_integral, b.CreateFCmpONE(unary_intrinsic(b, llvm::Intrinsic::rint, half_y), half_y));
  llvm::Value* negative_base = b.CreateFCmpOLT(x, f32(b, 0.0));
  // A negative base: odd integral exponents keep the sign, non-integral ones give NaN.
  llvm::Value* signed_result = b.CreateSelect(y_odd, b.CreateFNeg(result), result);
  llvm::Value* negative_result = b.CreateSelect(y_integral, signed_result, f32(b, NAN));
  result = b.CreateSelect(negative_base, negative_result, result);
  // -0 to an odd power keeps its sign.
  llvm::Value* negative_zero =
      b.CreateAnd(b.CreateFCmpOEQ(x, f32(b, 0.0)),
                  b.CreateICmpSLT(b.CreateBitCast(x, b.getInt32Ty()), i32(b, 0)));
  result = b.CreateSelect(b.CreateAnd(negative_zero, y_odd), b.CreateFNeg(result), result);
  llvm::Value* one = f32(b, 1.0);
  result = b.CreateSelect(b.CreateOr(b.CreateFCmpOEQ(y, f32(b, 0.0)), b.CreateFCmpOEQ(x, one)), one,
                          result);
  b.CreateRet(result);
}

llvm::Value* MathEmitter::exp(llvm::IRBuilder<>& b, llvm::Value* x) {
  return b.CreateCall(function("expf", 1, portable_), {x});
}

llvm::Value* MathEmitter::log(llvm::IRBuilder<>& b, llvm::Value* x) {
  return b.CreateCall(function("logf", 1, portable_), {x});
}

llvm::Value* MathEmitter::tanh(llvm::IRBuilder<>& b, llvm::Value* x) {
  return b.CreateCall(function("tanhf", 1, portable_), {x});
}

llvm::Value* MathEmitter::pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  return b.CreateCall(function("powf", 2, portable_), {x, y});
}

llvm::Value* MathEmitter::sigmoid(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Value* e = exp(b, b.CreateFNeg(x));
  return b.CreateFDiv(f32(b, 1.0), b.CreateFAdd(f32(b, 1.0), e));
}

llvm::Value* MathEmitter::gelu(llvm::IRBuilder<>& b, llvm::Value* x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  llvm::Value* cube = b.CreateFMul(b.CreateFMul(x, x), x);
  llvm::Value* inner = b.CreateFMul(f32(b, kSqrt2OverPi), fma(b, f32(b, 0.044715), cube, x));
  llvm::Value* one_plus = b.CreateFAdd(f32(b, 1.0), tanh(b, inner));
  return b.CreateFMul(b.CreateFMul(f32(b, 0.5), x), one_plus);
}

llvm::Value* MathEmitter::sqrt(llvm::IRBuilder<>& b, llvm::Value* x) {
  return unary_intrinsic(b, llvm::Intrinsic::sqrt, x);
}

llvm::Value* MathEmitter::rsqrt(llvm::IRBuilder<>& b, llvm::Value* x) {
  return b.CreateFDiv(f32(b, 1.0), sqrt(b, x));
}

// Note [Erf as one expression] (kernel_math.h).
llvm::Value* MathEmitter::erf(llvm::IRBuilder<>& b, llvm::Value* x) {
  constexpr double kP = 0.3275911;
  constexpr double kA[] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};
  llvm::Value* magnitude = unary_intrinsic(b, llvm::Intrinsic::fabs, x);
  llvm::Value* negative = b.CreateFCmpOLT(x, f32(b, 0.0));
  if (nvptx_) {
    constexpr double kLog2E = 1.4426950408889634;
    llvm::Value* t = b.CreateIntrinsic(llvm::Intrinsic::nvvm_div_approx_ftz_f, {},
                                       {f32(b, 1.0), fma(b, f32(b, kP), magnitude, f32(b, 1.0))});
    llvm::Value* poly = horner(b, t, {kA[0], kA[1], kA[2], kA[3], kA[4]});
    llvm::Value* decay =
        b.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {},
                          {b.CreateFMul(b.CreateFMul(magnitude, f32(b, -kLog2E)), magnitude)});
    llvm::Value* positive = fma(b, b.CreateFNeg(b.CreateFMul(t, poly)), decay, f32(b, 1.0));
    return b.CreateSelect(negative, b.CreateFNeg(positive), positive);
  }
  // The written-out form's operations in its order (elementwise_ops.cc's emit_erf).
  llvm::Value* t =
      b.CreateFDiv(f32(b, 1.0), b.CreateFAdd(f32(b, 1.0), b.CreateFMul(f32(b, kP), magnitude)));
  llvm::Value* poly = f32(b, kA[4]);
  for (int i = 3; i >= 0; --i) poly = b.CreateFAdd(f32(b, kA[i]), b.CreateFMul(t, poly));
  llvm::Value* decay = exp(b, b.CreateFNeg(b.CreateFMul(x, x)));
  llvm::Value* positive = b.CreateFSub(f32(b, 1.0), b.CreateFMul(b.CreateFMul(t, poly), decay));
  return b.CreateSelect(negative, b.CreateFNeg(positive), positive);
}

}  // namespace grove::compiler::codegen
