// Emitter: row reductions (one block per row on cuda, a loop on the host).
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

uint32_t reduction_block_size(const KernelSpec& spec) {
  uint32_t block = kWarpSize;
  while (block < 256 && block < static_cast<uint64_t>(spec.row_length())) block *= 2;
  return block;
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

}  // namespace grove::compiler::codegen::emitter_detail
