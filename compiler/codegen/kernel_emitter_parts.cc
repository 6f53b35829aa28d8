// The Emitter's multi-part kernels (Note [Multi-part kernels] and Note
// [Multi-part kernel arguments], kernel_spec.h): each part's pointers from the
// ABI's arguments, and the tile loop that maps a block to (part, tile) by a
// binary search over the tiles' prefix, baked in as constants.
#include <algorithm>
#include <vector>

#include "compiler/codegen/kernel_emitter_impl.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "runtime/error.h"

namespace grove::compiler::codegen::emitter_detail {

// Note [Multi-part kernel pointers as integers] (kernel_emitter.cc): on cuda a
// part's pointers arrive as integer parameters, read from the parameter space
// here, in the part's own block (an ld.param of the parameter by its PTX name,
// <kernel>_param_<n>: LLVM would read every parameter at the kernel's entry),
// and made global-space pointers; on the host they are pointers already.
std::vector<Value*> Emitter::part_pointers(const std::vector<Value*>& arguments) {
  std::vector<Value*> pointers;
  for (Value* argument : arguments) {
    if (!argument->getType()->isIntegerTy()) {
      pointers.push_back(argument);
      continue;
    }
    const auto* parameter = llvm::cast<llvm::Argument>(argument);
    auto* read = llvm::InlineAsm::get(llvm::FunctionType::get(b_.getInt64Ty(), {}, false),
                                      str_cat("ld.param.u64 $0, [", function_->getName().str(),
                                              "_param_", parameter->getArgNo(), "];"),
                                      "=l", /*hasSideEffects=*/false);
    Value* global = b_.CreateIntToPtr(b_.CreateCall(read, {}), b_.getInt8Ty()->getPointerTo(1));
    pointers.push_back(b_.CreateAddrSpaceCast(global, b_.getInt8PtrTy()));
  }
  return pointers;
}

int64_t multi_part_tile_count(const KernelSpec& spec) {
  int64_t tiles = 0;
  for (int64_t size : spec.part_sizes) {
    tiles += (size + kMultiPartTile - 1) / kMultiPartTile;
  }
  return tiles;
}

void Emitter::split_part_pointers() {
  if (spec_.part_sizes.empty()) {
    part_inputs_ = {inputs_};
    part_outputs_ = {outputs_};
    return;
  }
  const size_t parts = spec_.part_count();
  size_t next_input = 0;
  std::vector<Value*> shared(spec_.inputs.size(), nullptr);
  for (size_t i = 0; i < spec_.inputs.size(); ++i) {
    if (spec_.inputs[i].shared_by_parts) {
      shared[i] = inputs_[next_input++];
    }
  }
  for (size_t p = 0; p < parts; ++p) {
    std::vector<Value*> pointers;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      pointers.push_back(shared[i] != nullptr ? shared[i] : inputs_[next_input++]);
    }
    part_inputs_.push_back(std::move(pointers));
  }
  size_t next_output = 0;
  for (size_t p = 0; p < parts; ++p) {
    std::vector<Value*> pointers;
    for (const OutputSpec& output : spec_.outputs) {
      pointers.push_back(output.in_place_input >= 0
                             ? part_inputs_[p][static_cast<size_t>(output.in_place_input)]
                             : outputs_[next_output++]);
    }
    part_outputs_.push_back(std::move(pointers));
  }
}

void Emitter::emit_parts(const LoopBody& body) {
  // first_tile[p]: the number of the first tile of part p (parts in order).
  std::vector<int64_t> first_tile;
  std::vector<size_t> nonempty;
  int64_t tiles = 0;
  for (size_t p = 0; p < spec_.part_sizes.size(); ++p) {
    first_tile.push_back(tiles);
    if (spec_.part_sizes[p] > 0) {
      nonempty.push_back(p);
    }
    tiles += (spec_.part_sizes[p] + kMultiPartTile - 1) / kMultiPartTile;
  }
  if (nonempty.empty()) {
    return;
  }
  if (nvptx()) {
    // One block per tile and no tile loop: in a loop, LLVM hoists every
    // part's tile-invariant offsets out of it, and they stay live in registers
    // (Note [Multi-part kernel pointers as integers]).
    Value* tile = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    auto* run = llvm::BasicBlock::Create(context_, "tile", function_);
    auto* done = llvm::BasicBlock::Create(context_, "tile_done", function_);
    b_.CreateCondBr(b_.CreateICmpSLT(tile, i64(tiles)), run, done);
    b_.SetInsertPoint(run);
    emit_part_search(tile, nonempty, 0, nonempty.size(), first_tile,
                     special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x),
                     i64(kElementwiseBlock), body, done);
    b_.SetInsertPoint(done);
    return;
  }
  Value* lane_start = i64(0);
  Value* lane_step = i64(1);
  loop(i64(0), i64(tiles), i64(1), {}, [&](Value* tile, const std::vector<Value*>&) {
    auto* done = llvm::BasicBlock::Create(context_, "tile_done", function_);
    emit_part_search(tile, nonempty, 0, nonempty.size(), first_tile, lane_start, lane_step, body,
                     done);
    b_.SetInsertPoint(done);
    return std::vector<Value*>{};
  });
}

// Parts nonempty[first, end) hold `tile`: halves the range by comparing the
// tile with the first tile of its middle part, then runs the one part's
// elements of the tile (lane_start, lane_start + lane_step, ... of it).
void Emitter::emit_part_search(Value* tile, const std::vector<size_t>& parts, size_t first,
                               size_t end, const std::vector<int64_t>& first_tile,
                               Value* lane_start, Value* lane_step, const LoopBody& body,
                               llvm::BasicBlock* done) {
  if (end - first == 1) {
    const size_t p = parts[first];
    inputs_ = part_pointers(part_inputs_[p]);
    outputs_ = part_pointers(part_outputs_[p]);
    const int64_t size = spec_.part_sizes[p];
    Value* begin = b_.CreateMul(b_.CreateSub(tile, i64(first_tile[p])), i64(kMultiPartTile));
    Value* tile_end = b_.CreateAdd(begin, i64(kMultiPartTile));
    Value* limit = b_.CreateSelect(b_.CreateICmpSLT(tile_end, i64(size)), tile_end, i64(size));
    loop(b_.CreateAdd(begin, lane_start), limit, lane_step, {}, body);
    b_.CreateBr(done);
    return;
  }
  const size_t middle = first + (end - first) / 2;
  auto* lower = llvm::BasicBlock::Create(context_, "parts_below", function_);
  auto* upper = llvm::BasicBlock::Create(context_, "parts_from", function_);
  b_.CreateCondBr(b_.CreateICmpSLT(tile, i64(first_tile[parts[middle]])), lower, upper);
  b_.SetInsertPoint(lower);
  emit_part_search(tile, parts, first, middle, first_tile, lane_start, lane_step, body, done);
  b_.SetInsertPoint(upper);
  emit_part_search(tile, parts, middle, end, first_tile, lane_start, lane_step, body, done);
}

}  // namespace grove::compiler::codegen::emitter_detail
