// Emitter: LLVM types, conversions, memory access and expression evaluation.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_emitter_impl.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/error.h"

namespace grove::compiler::codegen::emitter_detail {

llvm::Type* Emitter::memory_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return b_.getFloatTy();
    case DType::kF64:
      return b_.getDoubleTy();
    case DType::kF16:
    case DType::kBF16:
      return b_.getInt16Ty();
    case DType::kI32:
      return b_.getInt32Ty();
    case DType::kI64:
      return b_.getInt64Ty();
    case DType::kBool:
      return b_.getInt8Ty();
  }
  throw DTypeError(str_cat("codegen: no memory type for ", dtype));
}

llvm::Type* Emitter::register_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return b_.getFloatTy();
    case DType::kI32:
      return b_.getInt32Ty();
    case DType::kI64:
      return b_.getInt64Ty();
    case DType::kBool:
      return b_.getInt1Ty();
    default:
      throw DTypeError(str_cat("codegen: ", dtype, " is not a register dtype"));
  }
}

Value* Emitter::convert(Value* value, DType to) {
  llvm::Type* from_type = value->getType();
  if (to == DType::kBool) {
    if (from_type->isIntegerTy(1)) return value;
    if (from_type->isFloatingPointTy()) {
      return b_.CreateFCmpUNE(value, llvm::ConstantFP::get(from_type, 0.0));
    }
    return b_.CreateICmpNE(value, llvm::ConstantInt::get(from_type, 0));
  }
  llvm::Type* to_type = to == DType::kF64 ? b_.getDoubleTy() : register_type(to);
  if (from_type == to_type) return value;
  if (to_type->isFloatingPointTy()) {
    if (from_type->isFloatingPointTy()) return b_.CreateFPCast(value, to_type);
    if (from_type->isIntegerTy(1)) return b_.CreateUIToFP(value, to_type);
    return b_.CreateSIToFP(value, to_type);
  }
  if (from_type->isFloatingPointTy()) {
    // Saturating: out-of-range values clamp and NaN becomes 0, the same on every target.
    return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {to_type, from_type}, {value});
  }
  if (from_type->isIntegerTy(1)) return b_.CreateZExt(value, to_type);
  return b_.CreateSExtOrTrunc(value, to_type);
}

Value* Emitter::bf16_to_float(Value* bits) {
  Value* wide = b_.CreateShl(b_.CreateZExt(bits, b_.getInt32Ty()), 16);
  return b_.CreateBitCast(wide, b_.getFloatTy());
}

Value* Emitter::float_to_bf16(Value* value) {
  // Round to nearest even on the bits; NaN keeps its sign and becomes quiet
  // (runtime::float_to_bf16_bits does the same on the host).
  Value* bits = b_.CreateBitCast(value, b_.getInt32Ty());
  Value* is_nan =
      b_.CreateICmpUGT(b_.CreateAnd(bits, b_.getInt32(0x7fffffff)), b_.getInt32(0x7f800000));
  Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
  Value* rounded = b_.CreateLShr(b_.CreateAdd(bits, b_.CreateAdd(b_.getInt32(0x7fff), lsb)), 16);
  Value* quiet_nan = b_.CreateOr(b_.CreateLShr(bits, 16), b_.getInt32(0x40));
  return b_.CreateTrunc(b_.CreateSelect(is_nan, quiet_nan, rounded), b_.getInt16Ty());
}

Value* Emitter::f16_to_float(Value* bits) {
  if (nvptx()) return b_.CreateFPExt(b_.CreateBitCast(bits, b_.getHalfTy()), b_.getFloatTy());
  // The host JIT resolves this helper to runtime::f16_bits_to_float (host_jit.cc).
  llvm::FunctionCallee helper =
      module_.getOrInsertFunction("grove_f16_bits_to_float", b_.getFloatTy(), b_.getInt16Ty());
  return b_.CreateCall(helper, {bits});
}

Value* Emitter::float_to_f16(Value* value) {
  if (nvptx()) return b_.CreateBitCast(b_.CreateFPTrunc(value, b_.getHalfTy()), b_.getInt16Ty());
  llvm::FunctionCallee helper =
      module_.getOrInsertFunction("grove_float_to_f16_bits", b_.getInt16Ty(), b_.getFloatTy());
  return b_.CreateCall(helper, {value});
}

Value* Emitter::load_element(Value* base, DType dtype, Value* element_offset, DType to,
                             int64_t align_elements) {
  llvm::Type* type = memory_type(dtype);
  Value* pointer = b_.CreateGEP(type, b_.CreateBitCast(base, type->getPointerTo()), element_offset);
  Value* raw = b_.CreateAlignedLoad(
      type, pointer, llvm::Align(runtime::dtype_size(dtype) * static_cast<size_t>(align_elements)));
  Value* natural = raw;
  switch (dtype) {
    case DType::kBF16:
      natural = bf16_to_float(raw);
      break;
    case DType::kF16:
      natural = f16_to_float(raw);
      break;
    case DType::kBool:
      natural = b_.CreateICmpNE(raw, b_.getInt8(0));
      break;
    default:
      break;
  }
  return convert(natural, to);
}

void Emitter::store_element(Value* base, DType dtype, Value* element_offset, Value* value,
                            int64_t align_elements) {
  llvm::Type* type = memory_type(dtype);
  Value* pointer = b_.CreateGEP(type, b_.CreateBitCast(base, type->getPointerTo()), element_offset);
  Value* stored = nullptr;
  switch (dtype) {
    case DType::kBF16:
      stored = float_to_bf16(convert(value, DType::kF32));
      break;
    case DType::kF16:
      stored = float_to_f16(convert(value, DType::kF32));
      break;
    case DType::kBool:
      stored = b_.CreateZExt(convert(value, DType::kBool), b_.getInt8Ty());
      break;
    default:
      stored = convert(value, dtype);
      break;
  }
  b_.CreateAlignedStore(
      stored, pointer,
      llvm::Align(runtime::dtype_size(dtype) * static_cast<size_t>(align_elements)));
}

std::vector<Value*> Emitter::decompose(Value* linear, const runtime::Shape& shape) {
  std::vector<Value*> coordinates(shape.size(), nullptr);
  Value* rest = linear;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) {
      coordinates[d] = i64(0);
    } else if (d == 0) {
      coordinates[d] = rest;
    } else {
      coordinates[d] = b_.CreateURem(rest, i64(shape[d]));
      rest = b_.CreateUDiv(rest, i64(shape[d]));
    }
  }
  return coordinates;
}

Value* Emitter::offset(const runtime::Shape& strides, const runtime::Shape& shape,
                       const std::vector<Value*>& coordinates, Value* linear) {
  // A buffer laid out like the iteration space is addressed by the linear index.
  bool contiguous = linear != nullptr;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0 && contiguous;) {
    if (shape[d] != 1 && strides[d] != expected) contiguous = false;
    expected *= shape[d];
  }
  if (contiguous) return linear;
  Value* result = i64(0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 || strides[d] == 0) continue;
    result = b_.CreateAdd(result, b_.CreateMul(coordinates[d], i64(strides[d])));
  }
  return result;
}

Value* Emitter::identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return f32(0.0);
    case ReduceOp::kMax:
      return f32(-INFINITY);
    case ReduceOp::kMin:
      return f32(INFINITY);
  }
  return nullptr;
}

Value* Emitter::combine(ReduceOp op, Value* accumulator, Value* value) {
  switch (op) {
    case ReduceOp::kSum:
      return b_.CreateFAdd(accumulator, value);
    case ReduceOp::kMax:
    case ReduceOp::kMin: {
      // NaN wins: a NaN accumulator stays; a NaN value fails the comparison and is taken.
      Value* keep = op == ReduceOp::kMax ? b_.CreateFCmpOGE(accumulator, value)
                                         : b_.CreateFCmpOLE(accumulator, value);
      keep = b_.CreateOr(keep, b_.CreateFCmpUNO(accumulator, accumulator));
      return b_.CreateSelect(keep, accumulator, value);
    }
  }
  return nullptr;
}

Value* Emitter::philox_uniform(Value* seed, Value* counter) {
  // Philox4x32-10 exactly as compiler/ops/philox.h: 32-bit words, 64-bit products.
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* i64 = b_.getInt64Ty();
  auto low = [&](Value* wide) { return b_.CreateTrunc(wide, i32); };
  auto high = [&](Value* wide) { return b_.CreateTrunc(b_.CreateLShr(wide, 32), i32); };
  Value* c0 = low(counter);
  Value* c1 = high(counter);
  Value* c2 = b_.getInt32(0);
  Value* c3 = b_.getInt32(0);
  Value* k0 = low(seed);
  Value* k1 = high(seed);
  for (int round = 0; round < 10; ++round) {
    Value* product0 = b_.CreateMul(b_.CreateZExt(c0, i64), b_.getInt64(0xD2511F53u));
    Value* product1 = b_.CreateMul(b_.CreateZExt(c2, i64), b_.getInt64(0xCD9E8D57u));
    Value* next0 = b_.CreateXor(b_.CreateXor(high(product1), c1), k0);
    Value* next1 = low(product1);
    Value* next2 = b_.CreateXor(b_.CreateXor(high(product0), c3), k1);
    Value* next3 = low(product0);
    c0 = next0, c1 = next1, c2 = next2, c3 = next3;
    k0 = b_.CreateAdd(k0, b_.getInt32(0x9E3779B9u));
    k1 = b_.CreateAdd(k1, b_.getInt32(0xBB67AE85u));
  }
  Value* bits = b_.CreateUIToFP(b_.CreateLShr(c0, 8), b_.getFloatTy());
  return b_.CreateFMul(bits, f32(1.0 / 16777216.0));
}

Value* Emitter::eval(int index, const Site& site, std::vector<Value*>& memo) {
  if (memo[index] != nullptr) return memo[index];
  const Expr& expr = spec_.exprs[index];
  Value* result = nullptr;
  switch (expr.op) {
    case ExprOp::kLoad: {
      const BufferSpec& input = spec_.inputs[expr.input];
      Value* at = offset(input.strides, spec_.iteration_shape, site.coordinates, site.linear);
      // Note [Elementwise kernels in aligned chunks].
      const bool aligned = site.chunk_start && chunk_aligned(input.strides, spec_.iteration_shape);
      result = load_element(inputs_[expr.input], input.dtype, at, expr.dtype,
                            aligned ? kElementwiseUnroll : 1);
      break;
    }
    case ExprOp::kConstant:
      if (expr.dtype == DType::kF32) {
        result = f32(expr.constant);
      } else if (expr.dtype == DType::kBool) {
        result = b_.getInt1(expr.constant != 0);
      } else {
        result = llvm::ConstantInt::get(register_type(expr.dtype),
                                        static_cast<int64_t>(expr.constant), true);
      }
      break;
    case ExprOp::kScalarParam:
      result = scalars_[expr.input];
      break;
    case ExprOp::kReduced:
      result = site.reduced[expr.reduction];
      break;
    case ExprOp::kIndex: {
      Value* coordinate = site.coordinates[expr.input];
      GROVE_CHECK(coordinate != nullptr, "codegen of '", spec_.name, "': expr ", index,
                  " reads the reduced dimension's index outside the row loop");
      result = coordinate;
      break;
    }
    default: {
      std::vector<Value*> operands;
      for (int operand : expr.operands) operands.push_back(eval(operand, site, memo));
      result = eval_op(expr, operands);
      break;
    }
  }
  memo[index] = result;
  return result;
}

Value* Emitter::eval_op(const Expr& expr, const std::vector<Value*>& x) {
  const bool is_float = x.empty() ? false : x[0]->getType()->isFloatTy();
  const bool is_bool = x.empty() ? false : x[0]->getType()->isIntegerTy(1);
  auto compare = [&](llvm::CmpInst::Predicate fp, llvm::CmpInst::Predicate signed_int,
                     llvm::CmpInst::Predicate unsigned_int) {
    if (is_float) return b_.CreateFCmp(fp, x[0], x[1]);
    return b_.CreateICmp(is_bool ? unsigned_int : signed_int, x[0], x[1]);
  };
  auto zero = [&] { return llvm::Constant::getNullValue(x[0]->getType()); };
  using P = llvm::CmpInst::Predicate;
  switch (expr.op) {
    case ExprOp::kNeg:
      return is_float ? b_.CreateFNeg(x[0]) : b_.CreateNeg(x[0]);
    case ExprOp::kExp:
      return math_.exp(b_, x[0]);
    case ExprOp::kLog:
      return math_.log(b_, x[0]);
    case ExprOp::kTanh:
      return math_.tanh(b_, x[0]);
    case ExprOp::kErf:
      return math_.erf(b_, x[0]);
    case ExprOp::kRoundToBf16:  // Note [Casts to a narrow float round in registers]
      return bf16_to_float(float_to_bf16(x[0]));
    case ExprOp::kRoundToF16:
      return f16_to_float(float_to_f16(x[0]));
    case ExprOp::kSigmoid:
      return math_.sigmoid(b_, x[0]);
    case ExprOp::kGelu:
      return math_.gelu(b_, x[0]);
    case ExprOp::kSqrt:
      return math_.sqrt(b_, x[0]);
    case ExprOp::kRsqrt:
      return math_.rsqrt(b_, x[0]);
    case ExprOp::kRelu: {
      // relu(NaN) is NaN, as in PyTorch.
      Value* negative = is_float ? b_.CreateFCmpOLT(x[0], zero()) : b_.CreateICmpSLT(x[0], zero());
      return b_.CreateSelect(negative, zero(), x[0]);
    }
    case ExprOp::kAbs:
      if (is_float) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x[0]);
      return b_.CreateSelect(b_.CreateICmpSLT(x[0], zero()), b_.CreateNeg(x[0]), x[0]);
    case ExprOp::kNot:
      return b_.CreateNot(x[0]);
    case ExprOp::kFloor:
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x[0]);
    case ExprOp::kCeil:
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x[0]);
    case ExprOp::kTrunc:
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x[0]);
    case ExprOp::kRound:
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x[0]);
    case ExprOp::kAdd:
      return is_float ? b_.CreateFAdd(x[0], x[1]) : b_.CreateAdd(x[0], x[1]);
    case ExprOp::kSub:
      return is_float ? b_.CreateFSub(x[0], x[1]) : b_.CreateSub(x[0], x[1]);
    case ExprOp::kMul:
      return is_float ? b_.CreateFMul(x[0], x[1]) : b_.CreateMul(x[0], x[1]);
    case ExprOp::kDiv:
      return b_.CreateFDiv(x[0], x[1]);
    case ExprOp::kPow:
      return math_.pow(b_, x[0], x[1]);
    case ExprOp::kMax:
    case ExprOp::kMin: {
      const bool is_max = expr.op == ExprOp::kMax;
      if (!is_float) {
        Value* first = b_.CreateICmp(is_max ? P::ICMP_SGE : P::ICMP_SLE, x[0], x[1]);
        return b_.CreateSelect(first, x[0], x[1]);
      }
      return combine(is_max ? ReduceOp::kMax : ReduceOp::kMin, x[0], x[1]);
    }
    case ExprOp::kLt:
      return compare(P::FCMP_OLT, P::ICMP_SLT, P::ICMP_ULT);
    case ExprOp::kLe:
      return compare(P::FCMP_OLE, P::ICMP_SLE, P::ICMP_ULE);
    case ExprOp::kGt:
      return compare(P::FCMP_OGT, P::ICMP_SGT, P::ICMP_UGT);
    case ExprOp::kGe:
      return compare(P::FCMP_OGE, P::ICMP_SGE, P::ICMP_UGE);
    case ExprOp::kEq:
      return compare(P::FCMP_OEQ, P::ICMP_EQ, P::ICMP_EQ);
    case ExprOp::kNe:
      return compare(P::FCMP_UNE, P::ICMP_NE, P::ICMP_NE);
    case ExprOp::kAnd:
      return b_.CreateAnd(x[0], x[1]);
    case ExprOp::kOr:
      return b_.CreateOr(x[0], x[1]);
    case ExprOp::kXor:
      return b_.CreateXor(x[0], x[1]);
    case ExprOp::kIntDiv: {
      // A zero divisor would be undefined behaviour: it divides by 1 instead.
      Value* divisor = b_.CreateSelect(b_.CreateICmpEQ(x[1], zero()),
                                       llvm::ConstantInt::get(x[1]->getType(), 1), x[1]);
      return b_.CreateSDiv(x[0], divisor);
    }
    case ExprOp::kWhere:
      return b_.CreateSelect(x[0], x[1], x[2]);
    case ExprOp::kCast:
      return convert(x[0], expr.dtype);
    case ExprOp::kLoadAt:
      return load_element(inputs_[expr.input], spec_.inputs[expr.input].dtype, x[0], expr.dtype);
    case ExprOp::kPhilox:
      return philox_uniform(x[0], x[1]);
    default:
      break;
  }
  throw Error(
      str_cat("codegen of '", spec_.name, "': unhandled expr op ", static_cast<int>(expr.op)));
}

}  // namespace grove::compiler::codegen::emitter_detail
