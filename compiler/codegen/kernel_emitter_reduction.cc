// Emitter: row reductions (one block per row on cuda, a loop on the host).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_emitter_impl.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/error.h"

namespace grove::compiler::codegen {

bool rows_in_registers_enabled() {
  const char* value = std::getenv("GROVE_ROWS_IN_REGISTERS");
  return value == nullptr || std::string(value) != "0";
}

bool one_barrier_reduce_enabled() {
  const char* value = std::getenv("GROVE_ONE_BARRIER_REDUCE");
  return value != nullptr && std::string(value) == "1";
}

bool warp_held_rows_enabled() {
  const char* value = std::getenv("GROVE_WARP_HELD_ROWS");
  return value == nullptr || std::string(value) != "0";
}

}  // namespace grove::compiler::codegen

namespace grove::compiler::codegen::emitter_detail {

// Note [Warp-per-row reductions]: a lane's loads of one iteration are in
// flight together, so the iteration count is the number of L2 round trips
// before the row is folded: up to 16 elements per lane (a 512-long row in one
// iteration), fewer where the unrolled loop would not run once. ptxas keeps
// this within registers for up to 32 reductions sharing the pass (a small-M
// GEMM's rows: 96 registers at M = 32, no spills). Results do not depend on
// it (each lane folds its elements in increasing order). Tests: ModelPtx.*
// assembles every kernel; SmallMGemm* compare the kernel with the host GEMM.
int64_t warp_rows_unroll(const KernelSpec& spec) {
  int64_t unroll = kMaxWarpRowsUnroll;
  while (unroll > 1 && (unroll - 1) * kWarpSize >= spec.row_length()) unroll /= 2;
  while (spec.warp_rows_max_unroll > 0 && unroll > spec.warp_rows_max_unroll) unroll /= 2;
  return unroll;
}

// Note [Short rows held by a warp]: a row of at most 32 elements (a mean over
// MLP-Mixer's 16 tokens: 8192 rows at batch 16) reduced by a block of its own
// pays a block launch per row. Such rows instead run a warp per row
// (kWarpRowsPerBlock rows per 128-thread block, grid-stride over rows): lane l
// evaluates its element once, keeps it in registers for every reduction and
// the element outputs, and a butterfly of warp shuffles combines the lanes (no
// shared memory, no barrier). Lanes past the row evaluate its last element
// (loads in bounds) and fold the identity. The butterfly is the 32-thread
// block's, so the sums are unchanged. Longer rows keep a block per row: held
// by a warp (up to 16 elements per lane) the layer norms of 256 and 512
// features ran 1.7x and 2.2x slower (session 22 r1, H200: nn.TransformerDecoder
// b1 3.1 us against 1.8, MLP-Mixer b16 7.5 against 3.5; the mean 2.2 against
// 5.9), the block's threads keeping more loads in flight. At most
// kMaxWarpHeldReductions reductions. GROVE_WARP_HELD_ROWS=0 keeps a block per
// row (the kernel cache keys the form). Tests: KernelSpec.LaunchGeometryFollows
// TheDocumentedRules, Reduction.ShortRowsHeldByAWarpOnCudaMatchTheHost (cuda
// against the host, both forms), and on cuda every reduction test.
bool warp_held_rows(const KernelSpec& spec) {
  return !spec.warp_rows && !spec.thread_rows && spec.part_sizes.empty() &&
         spec.row_length() >= 1 && spec.row_length() <= kMaxWarpHeldPerLane * kWarpSize &&
         spec.reductions.size() <= kMaxWarpHeldReductions && warp_held_rows_enabled();
}

uint32_t reduction_block_size(const KernelSpec& spec) {
  if (spec.thread_rows) return kThreadRowsPerBlock;
  if (spec.warp_rows || warp_held_rows(spec)) return kWarpRowsPerBlock * kWarpSize;
  uint32_t block = kWarpSize;
  while (block < 256 && block < static_cast<uint64_t>(spec.row_length())) block *= 2;
  return block;
}

uint32_t reduction_grid_size(const KernelSpec& spec) {
  uint64_t blocks = static_cast<uint64_t>(spec.row_count());
  if (spec.warp_rows || warp_held_rows(spec)) {
    blocks = (blocks + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
  }
  if (spec.thread_rows) blocks = (blocks + kThreadRowsPerBlock - 1) / kThreadRowsPerBlock;
  return static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, kMaxReductionGrid));
}

Value* Emitter::warp_reduce(ReduceOp op, Value* value) {
  for (uint32_t lane_mask = kWarpSize / 2; lane_mask > 0; lane_mask /= 2) {
    Value* other = b_.CreateIntrinsic(
        llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
        {b_.getInt32(0xffffffff), value, b_.getInt32(lane_mask), b_.getInt32(kWarpSize - 1)});
    value = combine(op, value, other);
  }
  return value;
}

// Note [One barrier per block reduction]: with two barriers per reduction
// (Note [Block reduction slots]) a layer norm's mean and variance wait at four
// barriers, each behind warp 0's fold of the slots. Where the kernel has an
// even number of reductions (a layer norm's or a softmax's two) the slots are
// two sets used in turn (reduction r writes set r % 2): warp leaders write
// their set, one barrier, and then every warp folds the set itself, exactly
// as warp 0 did (the same slots in the same lanes, the same butterfly), taking
// lane 0's total as warp 0's lane 0 wrote it: the same bits. A set is written
// again two reductions later, after the barrier between, which every warp
// passes only once it has read the set. Off unless GROVE_ONE_BARRIER_REDUCE=1
// (the kernel cache keys the form): session 22 r2 (H200) saw no win inside the
// models, one barrier against two: ViT b16 574.0 against 569.9 us per call,
// MLP-Mixer b16 653.3 against 656.6, TD b1 86.8 against 86.5. Tests: CudaExecution.* and
// Reduction.ShortRowsHeldByAWarpOnCudaMatchTheHost (cuda against the host: the
// layer norms and softmaxes of 33 to 512 elements), ModelPtx.ShortRowsAreLoaded
// OnceForEveryPass (one barrier per reduction; ptxas).
bool one_barrier_reduce(const KernelSpec& spec) {
  return spec.reductions.size() % 2 == 0 && !spec.warp_rows && !spec.thread_rows &&
         !warp_held_rows(spec) && reduction_block_size(spec) > kWarpSize &&
         one_barrier_reduce_enabled();
}

Value* Emitter::block_reduce(ReduceOp op, Value* partial, size_t reduction) {
  const uint32_t block = reduction_block_size(spec_);
  auto warp_reduce = [&](Value* value) { return this->warp_reduce(op, value); };
  Value* value = warp_reduce(partial);
  // The butterfly leaves the total in every lane.
  if (block == kWarpSize || spec_.warp_rows) return value;
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
  if (one_barrier_reduce(spec_)) {
    // Note [One barrier per block reduction]: set reduction % 2 of two.
    Value* set = b_.getInt32(static_cast<uint32_t>((reduction % 2) * (kWarpSize + 1)));
    if_then(b_.CreateICmpEQ(lane, b_.getInt32(0)),
            [&] { b_.CreateStore(value, slot(b_.CreateAdd(set, warp))); });
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    Value* in_range = b_.CreateICmpULT(lane, b_.getInt32(warps));
    Value* loaded = b_.CreateLoad(
        b_.getFloatTy(), slot(b_.CreateAdd(set, b_.CreateSelect(in_range, lane, b_.getInt32(0)))));
    Value* total = warp_reduce(b_.CreateSelect(in_range, loaded, identity(op)));
    return b_.CreateIntrinsic(
        llvm::Intrinsic::nvvm_shfl_sync_idx_f32, {},
        {b_.getInt32(0xffffffff), total, b_.getInt32(0), b_.getInt32(kWarpSize - 1)});
  }
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

std::vector<Value*> Emitter::reduce_row(size_t first, size_t end, Value* element_start,
                                        Value* element_step,
                                        const std::function<Site(Value*)>& element_site) {
  std::vector<Value*> totals;
  for (size_t r = first; r < end; ++r) totals.push_back(identity(spec_.reductions[r].op));
  // Folds the elements at `ks` (in order) into `accumulators`. One memo per
  // element shared by the group: an expression several reductions read (a
  // small-M GEMM's weight element) is loaded once.
  auto fold = [&](const std::vector<Value*>& ks, std::vector<Value*> accumulators) {
    std::vector<std::vector<Value*>> values;
    for (Value* k : ks) {
      std::vector<Value*> memo(spec_.exprs.size(), nullptr);
      const Site at = element_site(k);
      values.emplace_back();
      for (size_t r = first; r < end; ++r) {
        values.back().push_back(eval(spec_.reductions[r].expr, at, memo));
      }
    }
    for (const std::vector<Value*>& element : values) {
      for (size_t r = first; r < end; ++r) {
        accumulators[r - first] =
            combine(spec_.reductions[r].op, accumulators[r - first], element[r - first]);
      }
    }
    return accumulators;
  };
  const int64_t length = spec_.row_length();
  Value* remainder_start = element_start;
  const int64_t unroll = warp_rows_unroll(spec_);
  const int64_t unrolled_end = length - (unroll - 1) * kWarpSize;
  if (nvptx() && spec_.warp_rows && unroll > 1 && unrolled_end > 0) {
    // Note [Warp-per-row reductions]: warp_rows_unroll elements per lane per
    // iteration, all loaded before any is folded (loads in flight together
    // instead of one L2 round trip per element); each lane still folds its
    // elements in increasing order, so the sums are those of the plain loop.
    const int64_t stride = unroll * kWarpSize;
    totals = loop(element_start, i64(unrolled_end), i64(stride), totals,
                  [&](Value* k, const std::vector<Value*>& accumulators) {
                    std::vector<Value*> ks;
                    for (int64_t j = 0; j < unroll; ++j) {
                      ks.push_back(b_.CreateAdd(k, i64(j * kWarpSize)));
                    }
                    return fold(ks, accumulators);
                  });
    // Where this lane's unrolled iterations stopped.
    Value* left = b_.CreateSub(i64(unrolled_end), element_start);
    Value* positive = b_.CreateICmpSGT(left, i64(0));
    Value* iterations = b_.CreateSelect(
        positive, b_.CreateUDiv(b_.CreateAdd(left, i64(stride - 1)), i64(stride)), i64(0));
    remainder_start = b_.CreateAdd(element_start, b_.CreateMul(iterations, i64(stride)));
  }
  if (nvptx() && spec_.thread_rows && length <= kMaxThreadRowsUnrolled) {
    // Note [Thread-per-row reductions]: a short row (a tiny-K GEMM's inner
    // dimension) is folded straight, every element loaded before any is
    // folded, in increasing order as the loop would.
    std::vector<Value*> ks;
    for (int64_t k = 0; k < length; ++k) ks.push_back(i64(k));
    totals = fold(ks, totals);
  } else {
    totals = loop(
        remainder_start, i64(length), element_step, totals,
        [&](Value* k, const std::vector<Value*>& accumulators) { return fold({k}, accumulators); });
  }
  if (nvptx() && !spec_.thread_rows) {
    for (size_t r = first; r < end; ++r) {
      totals[r - first] = block_reduce(spec_.reductions[r].op, totals[r - first], r);
    }
  }
  return totals;
}

// Note [Rows held in registers]: on cuda a block reduces a row with a thread
// per element where the row is no longer than the block (layer norms of 192 to
// 256 features: one element per thread). The plain path evaluates the row's
// expression once per pass (a layer norm's mean, its variance, then the
// element outputs: three loads of every input element, each an L2 round trip
// behind a barrier); here each thread evaluates its element once, the values
// serving every reduction and output (threads past the row evaluate the last
// element, keeping their loads in bounds, and fold the identity instead). Each
// thread still folds one element into the identity before the block's
// reduction, so the bits are the plain path's. GROVE_ROWS_IN_REGISTERS=0 keeps
// the plain path (the kernel cache keys the form: Note [Kernel cache]). Tests:
// ModelPtx.* (ptxas), and on cuda every reduction test (Devices/Reduction.*,
// the lowering and zoo tests).
bool rows_in_registers(const KernelSpec& spec) {
  return !spec.warp_rows && !spec.thread_rows && !warp_held_rows(spec) && spec.row_length() >= 1 &&
         spec.row_length() <= static_cast<int64_t>(reduction_block_size(spec)) &&
         rows_in_registers_enabled();
}

void Emitter::emit_rows_in_registers() {
  const int64_t rows = spec_.row_count();
  const int64_t length = spec_.row_length();
  runtime::Shape row_shape(spec_.iteration_shape.begin(), spec_.iteration_shape.end() - 1);
  Value* thread = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* block = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* grid = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* in_row = b_.CreateICmpULT(thread, i64(length));
  Value* element = b_.CreateSelect(in_row, thread, i64(length - 1));
  loop(block, i64(rows), grid, {}, [&](Value* row, const std::vector<Value*>&) {
    Site site;
    site.coordinates = decompose(row, row_shape);
    site.coordinates.push_back(element);
    site.linear = b_.CreateAdd(b_.CreateMul(row, i64(length)), element);
    std::vector<Value*> memo(spec_.exprs.size(), nullptr);
    for (size_t r = 0; r < spec_.reductions.size(); ++r) {
      const Reduction& reduction = spec_.reductions[r];
      Value* value =
          combine(reduction.op, identity(reduction.op), eval(reduction.expr, site, memo));
      value = b_.CreateSelect(in_row, value, identity(reduction.op));
      site.reduced.push_back(block_reduce(reduction.op, value, r));
    }
    Site row_site = site;
    row_site.coordinates.back() = nullptr;
    row_site.linear = nullptr;
    store_row_outputs_by(thread, row_site);
    store_element_outputs_if(site, memo, in_row);
    return std::vector<Value*>{};
  });
}

void Emitter::emit_warp_held_rows() {
  const int64_t rows = spec_.row_count();
  const int64_t length = spec_.row_length();
  const int64_t per_lane = (length + kWarpSize - 1) / kWarpSize;
  runtime::Shape row_shape(spec_.iteration_shape.begin(), spec_.iteration_shape.end() - 1);
  Value* thread = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* block = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* grid = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* lane = b_.CreateAnd(thread, i64(kWarpSize - 1));
  Value* row_start =
      b_.CreateAdd(b_.CreateMul(block, i64(kWarpRowsPerBlock)), b_.CreateLShr(thread, 5));
  // The lane's elements of a row, and whether each is in it (null: always).
  std::vector<Value*> elements, in_row;
  for (int64_t j = 0; j < per_lane; ++j) {
    Value* k = b_.CreateAdd(lane, i64(j * kWarpSize));
    const bool whole = (j + 1) * kWarpSize <= length;
    in_row.push_back(whole ? nullptr : b_.CreateICmpULT(k, i64(length)));
    elements.push_back(whole ? k : b_.CreateSelect(in_row.back(), k, i64(length - 1)));
  }
  loop(row_start, i64(rows), b_.CreateMul(grid, i64(kWarpRowsPerBlock)), {},
       [&](Value* row, const std::vector<Value*>&) {
         const std::vector<Value*> row_coordinates = decompose(row, row_shape);
         Value* row_base = b_.CreateMul(row, i64(length));
         std::vector<Site> sites(static_cast<size_t>(per_lane));
         std::vector<std::vector<Value*>> memos(sites.size(),
                                                std::vector<Value*>(spec_.exprs.size(), nullptr));
         for (size_t j = 0; j < sites.size(); ++j) {
           sites[j].coordinates = row_coordinates;
           sites[j].coordinates.push_back(elements[j]);
           sites[j].linear = b_.CreateAdd(row_base, elements[j]);
         }
         for (const Reduction& reduction : spec_.reductions) {
           std::vector<Value*> values;  // every element's value before any is folded
           for (size_t j = 0; j < sites.size(); ++j) {
             values.push_back(eval(reduction.expr, sites[j], memos[j]));
           }
           Value* total = identity(reduction.op);
           for (size_t j = 0; j < sites.size(); ++j) {
             Value* folded = combine(reduction.op, total, values[j]);
             total = in_row[j] == nullptr ? folded : b_.CreateSelect(in_row[j], folded, total);
           }
           total = warp_reduce(reduction.op, total);
           for (Site& site : sites) site.reduced.push_back(total);
         }
         Site row_site = sites.front();
         row_site.coordinates.back() = nullptr;
         row_site.linear = nullptr;
         store_row_outputs_by(lane, row_site);
         for (size_t j = 0; j < sites.size(); ++j) {
           store_element_outputs_if(sites[j], memos[j],
                                    in_row[j] == nullptr ? b_.getTrue() : in_row[j]);
         }
         return std::vector<Value*>{};
       });
}

void Emitter::emit_reduction_rows() {
  if (nvptx() && warp_held_rows(spec_)) {
    emit_warp_held_rows();
    return;
  }
  if (nvptx() && rows_in_registers(spec_)) {
    emit_rows_in_registers();
    return;
  }
  const int64_t rows = spec_.row_count();
  const int64_t length = spec_.row_length();
  runtime::Shape row_shape(spec_.iteration_shape.begin(), spec_.iteration_shape.end() - 1);
  Value* row_start = i64(0);
  Value* row_step = i64(1);
  Value* element_start = i64(0);
  Value* element_step = i64(1);
  Value* leader = nullptr;  // the thread that writes per-row outputs: 0 in its block or warp
  if (nvptx()) {
    Value* thread = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    Value* block = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    Value* grid = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    if (spec_.thread_rows) {
      // Note [Thread-per-row reductions]: every thread leads its own row.
      row_start = b_.CreateAdd(b_.CreateMul(block, i64(kThreadRowsPerBlock)), thread);
      row_step = b_.CreateMul(grid, i64(kThreadRowsPerBlock));
      leader = i64(0);
    } else if (spec_.warp_rows) {
      // Note [Warp-per-row reductions].
      Value* lane = b_.CreateAnd(thread, i64(kWarpSize - 1));
      row_start =
          b_.CreateAdd(b_.CreateMul(block, i64(kWarpRowsPerBlock)), b_.CreateLShr(thread, 5));
      row_step = b_.CreateMul(grid, i64(kWarpRowsPerBlock));
      element_start = lane;
      element_step = i64(kWarpSize);
      leader = lane;
    } else {
      row_start = block;
      row_step = grid;
      element_start = thread;
      element_step = i64(reduction_block_size(spec_));
      leader = thread;
    }
  }
  // The highest reduction each expr reads (-1 for none), to group reductions.
  std::vector<int> reads(spec_.exprs.size(), -1);
  for (size_t i = 0; i < spec_.exprs.size(); ++i) {
    const Expr& expr = spec_.exprs[i];
    if (expr.op == ExprOp::kReduced) reads[i] = expr.reduction;
    for (int operand : expr.operands) reads[i] = std::max(reads[i], reads[operand]);
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
    // Note [Kernel spec reductions]: reductions run in order; a run of them
    // that reads none of each other's results shares one pass over the row.
    // Each still folds its elements in the same order, so results are unchanged.
    for (size_t first = 0; first < spec_.reductions.size();) {
      size_t end = first + 1;
      while (end < spec_.reductions.size() &&
             reads[static_cast<size_t>(spec_.reductions[end].expr)] < static_cast<int>(first)) {
        ++end;
      }
      for (Value* total : reduce_row(first, end, element_start, element_step, element_site)) {
        site.reduced.push_back(total);
      }
      first = end;
    }
    Site row_site = site;
    row_site.linear = nullptr;
    if (nvptx()) {
      store_row_outputs_by(leader, row_site);
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
