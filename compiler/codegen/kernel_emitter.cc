#include "compiler/codegen/kernel_emitter.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_math.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/error.h"

namespace grove::compiler::codegen {
namespace {

using llvm::Value;
using runtime::DType;

constexpr uint32_t kElementwiseBlock = 256;
constexpr uint32_t kMaxElementwiseGrid = 4096;
constexpr uint32_t kMaxReductionGrid = 65535;
constexpr uint32_t kWarpSize = 32;

uint32_t reduction_block_size(const KernelSpec& spec) {
  uint32_t block = kWarpSize;
  while (block < 256 && block < static_cast<uint64_t>(spec.row_length())) block *= 2;
  return block;
}

// Where an expression is evaluated: the coordinates of the current element
// (the last one null in a per-row context), its linear index over the
// iteration space (null when not at an element), and the reduced values so far.
struct Site {
  std::vector<Value*> coordinates;
  Value* linear = nullptr;
  std::vector<Value*> reduced;
};

class Emitter {
 public:
  Emitter(const KernelSpec& spec, const EmitOptions& options, llvm::Module& module)
      : spec_(spec),
        options_(options),
        module_(module),
        context_(module.getContext()),
        b_(context_),
        math_(module, options.target == EmitTarget::kNvptx || options.portable_math) {}

  void emit(const std::string& symbol);

 private:
  bool nvptx() const { return options_.target == EmitTarget::kNvptx; }
  llvm::Type* memory_type(DType dtype);
  llvm::Type* register_type(DType dtype);
  Value* i64(int64_t value) { return b_.getInt64(static_cast<uint64_t>(value)); }
  Value* f32(double value) { return llvm::ConstantFP::get(b_.getFloatTy(), value); }

  // Conversions between register values, and between memory and registers.
  Value* convert(Value* value, DType to);
  Value* load_element(Value* base, DType dtype, Value* offset, DType to);
  void store_element(Value* base, DType dtype, Value* offset, Value* value);
  Value* bf16_to_float(Value* bits);
  Value* float_to_bf16(Value* value);
  Value* f16_to_float(Value* bits);
  Value* float_to_f16(Value* value);

  // Row-major coordinates of `linear` over `shape` (shape-1 dims give 0).
  std::vector<Value*> decompose(Value* linear, const runtime::Shape& shape);
  // Element offset of a buffer with `strides` over `shape` at `coordinates`.
  Value* offset(const runtime::Shape& strides, const runtime::Shape& shape,
                const std::vector<Value*>& coordinates, Value* linear);

  Value* eval(int index, const Site& site, std::vector<Value*>& memo);
  Value* eval_op(const Expr& expr, const std::vector<Value*>& operands);
  Value* combine(ReduceOp op, Value* accumulator, Value* value);
  // compiler/ops/philox.h's philox_uniform over i64 seed and counter values.
  Value* philox_uniform(Value* seed, Value* counter);
  Value* identity(ReduceOp op);

  using LoopBody = std::function<std::vector<Value*>(Value* index, const std::vector<Value*>&)>;
  // for (i = start; i < end; i += step) carrying `carried`; returns their final values.
  std::vector<Value*> loop(Value* start, Value* end, Value* step, std::vector<Value*> carried,
                           const LoopBody& body);

  void store_outputs(const Site& site, bool per_row);
  void emit_elementwise();
  void emit_reduction_rows();
  Value* block_reduce(ReduceOp op, Value* partial);
  Value* special_register(llvm::Intrinsic::ID id);

  const KernelSpec& spec_;
  EmitOptions options_;
  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> b_;
  MathEmitter math_;
  llvm::Function* function_ = nullptr;
  std::vector<Value*> inputs_, outputs_, scalars_;
  llvm::GlobalVariable* shared_ = nullptr;
};

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

Value* Emitter::load_element(Value* base, DType dtype, Value* element_offset, DType to) {
  llvm::Type* type = memory_type(dtype);
  Value* pointer = b_.CreateGEP(type, b_.CreateBitCast(base, type->getPointerTo()), element_offset);
  Value* raw = b_.CreateAlignedLoad(type, pointer, llvm::Align(runtime::dtype_size(dtype)));
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

void Emitter::store_element(Value* base, DType dtype, Value* element_offset, Value* value) {
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
  b_.CreateAlignedStore(stored, pointer, llvm::Align(runtime::dtype_size(dtype)));
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
      result = load_element(inputs_[expr.input], input.dtype, at, expr.dtype);
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

std::vector<Value*> Emitter::loop(Value* start, Value* end, Value* step,
                                  std::vector<Value*> carried, const LoopBody& body) {
  llvm::BasicBlock* preheader = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(context_, "loop", function_);
  auto* body_block = llvm::BasicBlock::Create(context_, "body", function_);
  auto* exit = llvm::BasicBlock::Create(context_, "exit", function_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* index = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
  index->addIncoming(start, preheader);
  std::vector<llvm::PHINode*> phis;
  std::vector<Value*> current;
  for (Value* value : carried) {
    phis.push_back(b_.CreatePHI(value->getType(), 2));
    phis.back()->addIncoming(value, preheader);
    current.push_back(phis.back());
  }
  b_.CreateCondBr(b_.CreateICmpSLT(index, end), body_block, exit);
  b_.SetInsertPoint(body_block);
  std::vector<Value*> next = body(index, current);
  Value* next_index = b_.CreateAdd(index, step);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  b_.CreateBr(header);
  index->addIncoming(next_index, latch);
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  b_.SetInsertPoint(exit);
  return current;
}

void Emitter::store_outputs(const Site& site, bool per_row) {
  std::vector<Value*> memo(spec_.exprs.size(), nullptr);
  runtime::Shape shape = spec_.iteration_shape;
  if (per_row) shape.pop_back();
  for (size_t o = 0; o < spec_.outputs.size(); ++o) {
    const OutputSpec& output = spec_.outputs[o];
    if (output.per_row != per_row) continue;
    Value* value = eval(output.expr, site, memo);
    std::vector<Value*> coordinates = site.coordinates;
    if (per_row) coordinates.pop_back();
    Value* at = offset(output.strides, shape, coordinates, site.linear);
    store_element(outputs_[o], output.dtype, at, value);
  }
}

Value* Emitter::special_register(llvm::Intrinsic::ID id) {
  return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty());
}

void Emitter::emit_elementwise() {
  Value* start = i64(0);
  Value* step = i64(1);
  if (nvptx()) {
    Value* block = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    Value* grid = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    start = b_.CreateAdd(b_.CreateMul(block, i64(kElementwiseBlock)),
                         special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
    step = b_.CreateMul(grid, i64(kElementwiseBlock));
  }
  loop(start, i64(spec_.element_count()), step, {}, [&](Value* index, const std::vector<Value*>&) {
    Site site;
    site.linear = index;
    site.coordinates = decompose(index, spec_.iteration_shape);
    store_outputs(site, /*per_row=*/false);
    return std::vector<Value*>{};
  });
}

Value* Emitter::block_reduce(ReduceOp op, Value* partial) {
  const uint32_t block = reduction_block_size(spec_);
  auto warp_reduce = [&](Value* value) {
    for (uint32_t lane_mask = kWarpSize / 2; lane_mask > 0; lane_mask /= 2) {
      Value* other = b_.CreateIntrinsic(
          llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
          {b_.getInt32(0xffffffff), value, b_.getInt32(lane_mask), b_.getInt32(kWarpSize - 1)});
      value = combine(op, value, other);
    }
    return value;
  };
  Value* value = warp_reduce(partial);
  if (block == kWarpSize) return value;  // the butterfly leaves the total in every lane
  // Note [Block reduction slots]: warp leaders write slots 0..warps-1, warp 0
  // folds them into slot 32, and two barriers per reduction order every write
  // after the reads of the previous use, so one 33-float array serves every
  // reduction of every row.
  const uint32_t warps = block / kWarpSize;
  llvm::Type* array_type = shared_->getValueType();
  auto slot = [&](Value* index) {
    return b_.CreateInBoundsGEP(array_type, shared_, {b_.getInt32(0), index});
  };
  Value* tid = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
  Value* lane = b_.CreateAnd(tid, b_.getInt32(kWarpSize - 1));
  Value* warp = b_.CreateLShr(tid, 5);
  auto if_then = [&](Value* condition, const std::function<void()>& then) {
    auto* then_block = llvm::BasicBlock::Create(context_, "then", function_);
    auto* merge = llvm::BasicBlock::Create(context_, "merge", function_);
    b_.CreateCondBr(condition, then_block, merge);
    b_.SetInsertPoint(then_block);
    then();
    b_.CreateBr(merge);
    b_.SetInsertPoint(merge);
  };
  if_then(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] { b_.CreateStore(value, slot(warp)); });
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  if_then(b_.CreateICmpEQ(warp, b_.getInt32(0)), [&] {
    Value* in_range = b_.CreateICmpULT(lane, b_.getInt32(warps));
    Value* loaded =
        b_.CreateLoad(b_.getFloatTy(), slot(b_.CreateSelect(in_range, lane, b_.getInt32(0))));
    Value* total = warp_reduce(b_.CreateSelect(in_range, loaded, identity(op)));
    if_then(b_.CreateICmpEQ(lane, b_.getInt32(0)),
            [&] { b_.CreateStore(total, slot(b_.getInt32(32))); });
  });
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  return b_.CreateLoad(b_.getFloatTy(), slot(b_.getInt32(32)));
}

void Emitter::emit_reduction_rows() {
  const int64_t rows = spec_.row_count();
  const int64_t length = spec_.row_length();
  runtime::Shape row_shape(spec_.iteration_shape.begin(), spec_.iteration_shape.end() - 1);
  Value* row_start = i64(0);
  Value* row_step = i64(1);
  Value* element_start = i64(0);
  Value* element_step = i64(1);
  Value* thread = nullptr;
  if (nvptx()) {
    row_start = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    row_step = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    thread = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    element_start = thread;
    element_step = i64(reduction_block_size(spec_));
  }
  loop(row_start, i64(rows), row_step, {}, [&](Value* row, const std::vector<Value*>&) {
    Site site;
    site.coordinates = decompose(row, row_shape);
    site.coordinates.push_back(nullptr);
    Value* row_base = b_.CreateMul(row, i64(length));
    auto element_site = [&](Value* k) {
      Site at = site;
      at.coordinates.back() = k;
      at.linear = b_.CreateAdd(row_base, k);
      return at;
    };
    for (const Reduction& reduction : spec_.reductions) {
      std::vector<Value*> accumulated =
          loop(element_start, i64(length), element_step, {identity(reduction.op)},
               [&](Value* k, const std::vector<Value*>& accumulator) {
                 std::vector<Value*> memo(spec_.exprs.size(), nullptr);
                 Value* value = eval(reduction.expr, element_site(k), memo);
                 return std::vector<Value*>{combine(reduction.op, accumulator[0], value)};
               });
      Value* total = accumulated[0];
      if (nvptx()) total = block_reduce(reduction.op, total);
      site.reduced.push_back(total);
    }
    Site row_site = site;
    row_site.linear = nullptr;
    if (nvptx()) {
      auto* write = llvm::BasicBlock::Create(context_, "row_outputs", function_);
      auto* after = llvm::BasicBlock::Create(context_, "after_row_outputs", function_);
      b_.CreateCondBr(b_.CreateICmpEQ(thread, i64(0)), write, after);
      b_.SetInsertPoint(write);
      store_outputs(row_site, /*per_row=*/true);
      b_.CreateBr(after);
      b_.SetInsertPoint(after);
    } else {
      store_outputs(row_site, /*per_row=*/true);
    }
    loop(element_start, i64(length), element_step, {}, [&](Value* k, const std::vector<Value*>&) {
      store_outputs(element_site(k), /*per_row=*/false);
      return std::vector<Value*>{};
    });
    return std::vector<Value*>{};
  });
}

void Emitter::emit(const std::string& symbol) {
  const size_t pointer_count = spec_.inputs.size() + spec_.outputs.size();
  llvm::Type* byte_pointer = b_.getInt8PtrTy();
  if (nvptx()) {
    std::vector<llvm::Type*> parameters(pointer_count, byte_pointer);
    parameters.insert(parameters.end(), spec_.scalar_count, b_.getFloatTy());
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), parameters, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, module_);
    for (size_t i = 0; i < pointer_count; ++i) {
      // Generated kernels never alias an input with an output element they do
      // not themselves read, but in-place updates share buffers: no noalias.
      (i < spec_.inputs.size() ? inputs_ : outputs_).push_back(function_->getArg(i));
    }
    for (int s = 0; s < spec_.scalar_count; ++s)
      scalars_.push_back(function_->getArg(pointer_count + s));
    llvm::NamedMDNode* annotations = module_.getOrInsertNamedMetadata("nvvm.annotations");
    const uint32_t block =
        spec_.reductions.empty() ? kElementwiseBlock : reduction_block_size(spec_);
    auto annotate = [&](const char* key, uint32_t value) {
      annotations->addOperand(llvm::MDNode::get(
          context_, {llvm::ValueAsMetadata::get(function_), llvm::MDString::get(context_, key),
                     llvm::ConstantAsMetadata::get(b_.getInt32(value))}));
    };
    annotate("kernel", 1);
    annotate("maxntidx", block);
    if (!spec_.reductions.empty() && block > kWarpSize) {
      auto* array_type = llvm::ArrayType::get(b_.getFloatTy(), kWarpSize + 1);
      shared_ =
          new llvm::GlobalVariable(module_, array_type, false, llvm::GlobalValue::InternalLinkage,
                                   llvm::UndefValue::get(array_type), "grove_reduction_slots",
                                   nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      shared_->setAlignment(llvm::Align(4));
    }
    b_.SetInsertPoint(llvm::BasicBlock::Create(context_, "entry", function_));
  } else {
    auto* type = llvm::FunctionType::get(b_.getVoidTy(),
                                         {byte_pointer, b_.getInt64Ty()->getPointerTo()}, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, module_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(context_, "entry", function_));
    Value* slots = function_->getArg(1);
    auto slot = [&](size_t i) {
      return b_.CreateAlignedLoad(b_.getInt64Ty(),
                                  b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), slots, i),
                                  llvm::Align(8));
    };
    for (size_t i = 0; i < pointer_count; ++i) {
      Value* pointer = b_.CreateIntToPtr(slot(i), byte_pointer);
      (i < spec_.inputs.size() ? inputs_ : outputs_).push_back(pointer);
    }
    for (int s = 0; s < spec_.scalar_count; ++s) {
      Value* low = b_.CreateTrunc(slot(pointer_count + s), b_.getInt32Ty());
      scalars_.push_back(b_.CreateBitCast(low, b_.getFloatTy()));
    }
  }
  function_->addFnAttr(llvm::Attribute::NoUnwind);
  if (spec_.reductions.empty()) {
    emit_elementwise();
  } else {
    emit_reduction_rows();
  }
  b_.CreateRetVoid();
}

}  // namespace

std::unique_ptr<llvm::Module> emit_kernel_module(const KernelSpec& spec, const std::string& symbol,
                                                 const EmitOptions& options,
                                                 llvm::LLVMContext& context) {
  auto module = std::make_unique<llvm::Module>(symbol, context);
  Emitter(spec, options, *module).emit(symbol);
  std::string problems;
  llvm::raw_string_ostream stream(problems);
  GROVE_CHECK(!llvm::verifyModule(*module, &stream), "codegen of kernel '", spec.name,
              "' produced invalid LLVM IR (a grove bug; please report it with the spec's "
              "signature): ",
              stream.str(), "\nsignature: ", spec.signature());
  return module;
}

runtime::LaunchDims kernel_launch_dims(const KernelSpec& spec, runtime::DeviceType device_type) {
  runtime::LaunchDims dims;
  if (device_type != runtime::DeviceType::kCuda) return dims;
  if (spec.reductions.empty()) {
    const uint64_t blocks =
        (static_cast<uint64_t>(spec.element_count()) + kElementwiseBlock - 1) / kElementwiseBlock;
    dims.grid.x = static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, kMaxElementwiseGrid));
    dims.block.x = kElementwiseBlock;
  } else {
    dims.grid.x = static_cast<uint32_t>(
        std::clamp<uint64_t>(static_cast<uint64_t>(spec.row_count()), 1, kMaxReductionGrid));
    dims.block.x = reduction_block_size(spec);
  }
  return dims;
}

}  // namespace grove::compiler::codegen
