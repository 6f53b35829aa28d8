#include "compiler/codegen/kernel_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_emitter_impl.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/error.h"

namespace grove::compiler::codegen {
namespace emitter_detail {

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

void Emitter::store_row_outputs_by(Value* writer, const Site& row_site) {
  auto* write = llvm::BasicBlock::Create(context_, "row_outputs", function_);
  auto* after = llvm::BasicBlock::Create(context_, "after_row_outputs", function_);
  b_.CreateCondBr(b_.CreateICmpEQ(writer, i64(0)), write, after);
  b_.SetInsertPoint(write);
  store_outputs(row_site, /*per_row=*/true);
  b_.CreateBr(after);
  b_.SetInsertPoint(after);
}

void Emitter::store_element_outputs_if(const Site& site, std::vector<Value*>& memo, Value* store) {
  std::vector<std::pair<size_t, Value*>> values;
  for (size_t o = 0; o < spec_.outputs.size(); ++o) {
    if (spec_.outputs[o].per_row) continue;
    values.emplace_back(o, eval(spec_.outputs[o].expr, site, memo));
  }
  auto* write = llvm::BasicBlock::Create(context_, "element_outputs", function_);
  auto* after = llvm::BasicBlock::Create(context_, "after_element_outputs", function_);
  b_.CreateCondBr(store, write, after);
  b_.SetInsertPoint(write);
  for (const auto& [o, value] : values) {
    const OutputSpec& output = spec_.outputs[o];
    Value* at = offset(output.strides, spec_.iteration_shape, site.coordinates, site.linear);
    store_element(outputs_[o], output.dtype, at, value);
  }
  b_.CreateBr(after);
  b_.SetInsertPoint(after);
}

Value* Emitter::special_register(llvm::Intrinsic::ID id) {
  return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty());
}

// Note [Unrolled elementwise kernels]: on cuda each thread of an elementwise
// kernel takes kElementwiseUnroll elements per iteration of its grid-stride
// loop (base, base + stride, ...), evaluating all of them, loads first, before
// it stores any: a thread then has that many loads in flight instead of one,
// which a bandwidth-bound kernel needs to approach the memory's bandwidth
// (MLP-Mixer's bias + GELU kernels at batch 16 took 7.5 us each with one
// element per thread, against 5.0 us for PyTorch's Triton kernel, session
// 16's H100 lease). Elements past the end are evaluated at the last element
// (their loads stay in bounds) and not stored; the grid is sized for the
// unrolled count (kernel_launch_dims). Each element's value is computed as
// before, so results are unchanged. Tests: the codegen and lowering tests on
// cuda (every elementwise kernel: Devices/Elementwise.*, CudaExecution.* in
// tests/compiler/codegen), the PTX tests (ptxas accepts the loop),
// KernelSpec.LaunchGeometryFollowsTheDocumentedRules.
// Note [Elementwise kernels in aligned chunks]: on cuda, where every chunk of
// kElementwiseUnroll consecutive elements lies in one row of the iteration
// space (its element count and last dimension multiples of the chunk), each
// thread takes one chunk per iteration of its grid-stride loop instead of
// kElementwiseUnroll elements a grid apart: the chunk's coordinates are its
// first element's plus 0..3 along the last dimension (one decomposition of
// the index, not four), and the loads and stores of a buffer whose last
// stride is 1 (its other strides multiples of the chunk) are consecutive, the
// first carrying the chunk's alignment, so LLVM's load/store vectorizer makes
// them one 16-byte access (f32) where the kernel would issue four. The kernel
// checks that every such buffer's pointer is aligned to the chunk and runs the
// unchunked loop otherwise (a view at an odd offset). Every element's value is
// computed by the same expressions, so results are unchanged; the launch
// geometry is the same (a thread per chunk of the grid's share).
// Session 22 r1 (H200, one process): MLP-Mixer b16 750.1 us per call against
// 764.3 unchunked (its token-mixing gelu 5.8 us against 6.9, its copies 1.3
// against 1.6). GROVE_CHUNKED_ELEMENTWISE=0 keeps the unchunked loop (the
// kernel cache keys the form). Tests: CudaExecution.KernelsOnCudaMatchTheHostKernels
// (a chunked kernel with contiguous, broadcast and transposed buffers, on cuda
// against the host), Ptx.ElementwiseChunksLoadAndStoreVectors.
bool chunk_aligned(const runtime::Shape& strides, const runtime::Shape& shape) {
  if (shape.empty() || strides.size() != shape.size() || strides.back() != 1 ||
      shape.back() % kElementwiseUnroll != 0) {
    return false;
  }
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (shape[d] != 1 && strides[d] % kElementwiseUnroll != 0) return false;
  }
  return true;
}

bool chunked_elementwise(const KernelSpec& spec) {
  const runtime::Shape& shape = spec.iteration_shape;
  if (!spec.part_sizes.empty() || !spec.reductions.empty() || shape.empty() ||
      spec.element_count() % kElementwiseUnroll != 0 || shape.back() % kElementwiseUnroll != 0 ||
      !chunked_elementwise_enabled()) {
    return false;
  }
  bool any = false;
  for (const BufferSpec& input : spec.inputs) any |= chunk_aligned(input.strides, shape);
  for (const OutputSpec& output : spec.outputs) any |= chunk_aligned(output.strides, shape);
  return any;
}

void Emitter::emit_elementwise_chunks(Value* thread_start, Value* stride) {
  const runtime::Shape& shape = spec_.iteration_shape;
  auto chunk = [&](Value* base, const std::vector<Value*>&) {
    const std::vector<Value*> first = decompose(base, shape);
    // Every element's values first (loads before any store), then the stores.
    std::vector<std::vector<std::pair<Value*, Value*>>> stores(kElementwiseUnroll);
    for (int64_t u = 0; u < kElementwiseUnroll; ++u) {
      Site site;
      site.coordinates = first;
      if (u > 0) {
        site.coordinates.back() = b_.CreateAdd(first.back(), i64(u));
        site.linear = b_.CreateAdd(base, i64(u));
      } else {
        site.linear = base;
      }
      site.chunk_start = u == 0;
      std::vector<Value*> memo(spec_.exprs.size(), nullptr);
      for (const OutputSpec& output : spec_.outputs) {
        Value* value = eval(output.expr, site, memo);
        stores[static_cast<size_t>(u)].emplace_back(
            offset(output.strides, shape, site.coordinates, site.linear), value);
      }
    }
    for (int64_t u = 0; u < kElementwiseUnroll; ++u) {
      for (size_t o = 0; o < spec_.outputs.size(); ++o) {
        const OutputSpec& output = spec_.outputs[o];
        const auto& [at, value] = stores[static_cast<size_t>(u)][o];
        const bool aligned = u == 0 && chunk_aligned(output.strides, shape);
        store_element(outputs_[o], output.dtype, at, value, aligned ? kElementwiseUnroll : 1);
      }
    }
    return std::vector<Value*>{};
  };
  loop(thread_start, i64(spec_.element_count()), stride, {}, chunk);
}

void Emitter::emit_elementwise() {
  auto body = [&](Value* index, const std::vector<Value*>&) {
    Site site;
    site.linear = index;
    site.coordinates = decompose(index, spec_.iteration_shape);
    store_outputs(site, /*per_row=*/false);
    return std::vector<Value*>{};
  };
  if (!spec_.part_sizes.empty()) {
    emit_parts(body);
    return;
  }
  if (!nvptx()) {
    loop(i64(0), i64(spec_.element_count()), i64(1), {}, body);
    return;
  }
  Value* block = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* grid = special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* start = b_.CreateAdd(b_.CreateMul(block, i64(kElementwiseBlock)),
                              special_register(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
  Value* stride = b_.CreateMul(grid, i64(kElementwiseBlock));
  llvm::BasicBlock* done = nullptr;
  if (chunked_elementwise(spec_)) {
    // Note [Elementwise kernels in aligned chunks]: the chunks where every
    // aligned buffer's pointer is, the unchunked loop below otherwise.
    const runtime::Shape& shape = spec_.iteration_shape;
    Value* misaligned = i64(0);
    auto check = [&](Value* pointer, DType dtype) {
      const int64_t bytes = kElementwiseUnroll * static_cast<int64_t>(runtime::dtype_size(dtype));
      misaligned = b_.CreateOr(
          misaligned, b_.CreateAnd(b_.CreatePtrToInt(pointer, b_.getInt64Ty()), i64(bytes - 1)));
    };
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      if (chunk_aligned(spec_.inputs[i].strides, shape)) check(inputs_[i], spec_.inputs[i].dtype);
    }
    for (size_t o = 0; o < spec_.outputs.size(); ++o) {
      if (chunk_aligned(spec_.outputs[o].strides, shape)) {
        check(outputs_[o], spec_.outputs[o].dtype);
      }
    }
    auto* chunks = llvm::BasicBlock::Create(context_, "chunks", function_);
    auto* elements = llvm::BasicBlock::Create(context_, "elements", function_);
    done = llvm::BasicBlock::Create(context_, "done", function_);
    b_.CreateCondBr(b_.CreateICmpEQ(misaligned, i64(0)), chunks, elements);
    b_.SetInsertPoint(chunks);
    emit_elementwise_chunks(b_.CreateMul(start, i64(kElementwiseUnroll)),
                            b_.CreateMul(stride, i64(kElementwiseUnroll)));
    b_.CreateBr(done);
    b_.SetInsertPoint(elements);
  }
  Value* count = i64(spec_.element_count());
  Value* last = i64(spec_.element_count() - 1);
  const runtime::Shape& shape = spec_.iteration_shape;
  auto unrolled = [&](Value* base, const std::vector<Value*>&) {
    // Every element's values first (loads before any store), then the stores.
    std::vector<Value*> indices;
    std::vector<std::vector<std::pair<Value*, Value*>>> stores(kElementwiseUnroll);
    for (int64_t u = 0; u < kElementwiseUnroll; ++u) {
      Value* index = u == 0 ? base : b_.CreateAdd(base, b_.CreateMul(stride, i64(u)));
      indices.push_back(index);
      Value* at = u == 0 ? index : b_.CreateSelect(b_.CreateICmpSLT(index, count), index, last);
      Site site;
      site.linear = at;
      site.coordinates = decompose(at, shape);
      std::vector<Value*> memo(spec_.exprs.size(), nullptr);
      for (const OutputSpec& output : spec_.outputs) {
        if (output.per_row) {  // none in an elementwise kernel; kept aligned with outputs_
          stores[static_cast<size_t>(u)].emplace_back(nullptr, nullptr);
          continue;
        }
        Value* value = eval(output.expr, site, memo);
        stores[static_cast<size_t>(u)].emplace_back(
            offset(output.strides, shape, site.coordinates, site.linear), value);
      }
    }
    for (int64_t u = 0; u < kElementwiseUnroll; ++u) {
      llvm::BasicBlock* after = nullptr;
      if (u > 0) {  // element 0 is in range: the loop's condition
        auto* store_block = llvm::BasicBlock::Create(context_, "store", function_);
        after = llvm::BasicBlock::Create(context_, "stored", function_);
        b_.CreateCondBr(b_.CreateICmpSLT(indices[static_cast<size_t>(u)], count), store_block,
                        after);
        b_.SetInsertPoint(store_block);
      }
      for (size_t o = 0; o < spec_.outputs.size(); ++o) {
        const auto& [at, value] = stores[static_cast<size_t>(u)][o];
        if (value == nullptr) continue;
        store_element(outputs_[o], spec_.outputs[o].dtype, at, value);
      }
      if (after != nullptr) {
        b_.CreateBr(after);
        b_.SetInsertPoint(after);
      }
    }
    return std::vector<Value*>{};
  };
  loop(start, count, b_.CreateMul(stride, i64(kElementwiseUnroll)), {}, unrolled);
  if (done != nullptr) {
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
}

void Emitter::emit(const std::string& symbol) {
  // Repeated pointers are passed once (Note [Multi-part kernel arguments]).
  const size_t input_pointers = spec_.input_argument_count();
  const size_t pointer_count = input_pointers + spec_.output_argument_count();
  llvm::Type* byte_pointer = b_.getInt8PtrTy();
  if (nvptx()) {
    // Note [Multi-part kernel pointers as integers]: a multi-part kernel's
    // pointers are 64-bit integers, made pointers inside the part that uses
    // them (part_pointers). Kernel pointer parameters are cast to the global
    // space at the kernel's entry, and those casts stay live through the whole
    // kernel: gpt's 69-part SGD step took 255 registers and spilled 1.3 KB per
    // thread (360 us a step on the H100 instead of tens). An integer parameter
    // is read where it is used. Test: ModelPtx.MultiPartKernelsKeepTheirPointersOutOfRegisters.
    llvm::Type* pointer_parameter =
        spec_.part_sizes.empty() ? byte_pointer : static_cast<llvm::Type*>(b_.getInt64Ty());
    std::vector<llvm::Type*> parameters(pointer_count, pointer_parameter);
    parameters.insert(parameters.end(), spec_.scalar_count, b_.getFloatTy());
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), parameters, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, module_);
    for (size_t i = 0; i < pointer_count; ++i) {
      // Generated kernels never alias an input with an output element they do
      // not themselves read, but in-place updates share buffers: no noalias.
      (i < input_pointers ? inputs_ : outputs_).push_back(function_->getArg(i));
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
    if (!spec_.reductions.empty() && block > kWarpSize && !spec_.warp_rows &&
        !warp_held_rows(spec_)) {
      // Note [One barrier per block reduction]: two sets of slots.
      auto* array_type = llvm::ArrayType::get(
          b_.getFloatTy(), (one_barrier_reduce(spec_) ? 2 : 1) * (kWarpSize + 1));
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
      (i < input_pointers ? inputs_ : outputs_).push_back(pointer);
    }
    for (int s = 0; s < spec_.scalar_count; ++s) {
      Value* low = b_.CreateTrunc(slot(pointer_count + s), b_.getInt32Ty());
      scalars_.push_back(b_.CreateBitCast(low, b_.getFloatTy()));
    }
  }
  function_->addFnAttr(llvm::Attribute::NoUnwind);
  split_part_pointers();
  if (spec_.reductions.empty()) {
    emit_elementwise();
  } else {
    emit_reduction_rows();
  }
  b_.CreateRetVoid();
}

}  // namespace emitter_detail

bool chunked_elementwise_enabled() {
  const char* value = std::getenv("GROVE_CHUNKED_ELEMENTWISE");
  return value == nullptr || std::string(value) != "0";
}

using emitter_detail::Emitter;
using emitter_detail::kElementwiseBlock;
using emitter_detail::kElementwiseUnroll;
using emitter_detail::kMaxElementwiseGrid;
using emitter_detail::reduction_block_size;
using emitter_detail::reduction_grid_size;

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
  if (!spec.part_sizes.empty()) {
    // One block per tile (Note [Multi-part kernels]).
    const auto tiles = static_cast<uint64_t>(emitter_detail::multi_part_tile_count(spec));
    GROVE_CHECK(tiles <= kMaxMultiPartTiles, "kernel '", spec.name, "': ", tiles, " tiles of ",
                kMultiPartTile, " elements exceed a grid's ", kMaxMultiPartTiles,
                " blocks (a grove bug: horizontal fusion must split the parts; please report it)");
    dims.grid.x = static_cast<uint32_t>(std::max<uint64_t>(tiles, 1));
    dims.block.x = kElementwiseBlock;
  } else if (spec.reductions.empty()) {
    // Note [Unrolled elementwise kernels]: each thread takes kElementwiseUnroll elements.
    constexpr uint64_t kPerBlock = uint64_t{kElementwiseBlock} * kElementwiseUnroll;
    const uint64_t blocks =
        (static_cast<uint64_t>(spec.element_count()) + kPerBlock - 1) / kPerBlock;
    dims.grid.x = static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, kMaxElementwiseGrid));
    dims.block.x = kElementwiseBlock;
  } else {
    dims.grid.x = reduction_grid_size(spec);
    dims.block.x = reduction_block_size(spec);
  }
  return dims;
}

}  // namespace grove::compiler::codegen
