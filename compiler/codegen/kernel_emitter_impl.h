// The Emitter behind emit_kernel_module (kernel_emitter.h): it builds the
// LLVM function of one KernelSpec. Its definitions are split by concern:
// kernel_emitter.cc (entry, argument ABI, elementwise loops),
// kernel_emitter_values.cc (types, loads and stores, expressions) and
// kernel_emitter_reduction.cc (row reductions). Internal to //compiler/codegen.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/kernel_math.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"

namespace grove::compiler::codegen::emitter_detail {

using llvm::Value;
using runtime::DType;

constexpr uint32_t kElementwiseBlock = 256;
constexpr uint32_t kMaxElementwiseGrid = 4096;
// Elements each thread of an elementwise kernel takes per loop iteration on
// cuda (Note [Unrolled elementwise kernels], kernel_emitter.cc).
constexpr int64_t kElementwiseUnroll = 4;
constexpr uint32_t kMaxReductionGrid = 65535;
constexpr uint32_t kWarpSize = 32;
// Note [Warp-per-row reductions] (kernel_spec.h): rows per block.
constexpr uint32_t kWarpRowsPerBlock = 4;
// ... and at most this many elements each lane loads per iteration of its row
// loop (warp_rows_unroll picks the count).
constexpr int64_t kMaxWarpRowsUnroll = 16;
// Note [Short rows held by a warp] (kernel_emitter_reduction.cc): the longest
// row a warp holds in registers, in elements per lane (one: rows of at most 32),
// and the most reductions such a kernel may have.
constexpr int64_t kMaxWarpHeldPerLane = 1;
constexpr size_t kMaxWarpHeldReductions = 4;
// Note [Thread-per-row reductions] (kernel_spec.h): threads (rows) per block.
constexpr uint32_t kThreadRowsPerBlock = 128;
// ... and the longest row a thread folds without a loop (its loads in flight together).
constexpr int64_t kMaxThreadRowsUnrolled = 32;

// Tiles of a multi-part kernel: ceil(size / kMultiPartTile) per part
// (Note [Multi-part kernels], kernel_spec.h).
int64_t multi_part_tile_count(const KernelSpec& spec);

// Elements each lane of a warp_rows kernel loads per iteration of its row loop
// (Note [Warp-per-row reductions] in kernel_spec.h).
int64_t warp_rows_unroll(const KernelSpec& spec);

// Whether a reduction kernel runs a warp per row with the row in registers
// (Note [Short rows held by a warp], kernel_emitter_reduction.cc).
bool warp_held_rows(const KernelSpec& spec);

// Whether a block reduction of `spec` waits at one barrier (Note [One barrier
// per block reduction], kernel_emitter_reduction.cc).
bool one_barrier_reduce(const KernelSpec& spec);

// Threads per block of a reduction kernel (Note [Kernel launch geometry]).
uint32_t reduction_block_size(const KernelSpec& spec);
// Blocks of a reduction kernel's grid (Note [Kernel launch geometry]).
uint32_t reduction_grid_size(const KernelSpec& spec);

// Where an expression is evaluated: the coordinates of the current element
// (the last one null in a per-row context), its linear index over the
// iteration space (null when not at an element), and the reduced values so far.
struct Site {
  std::vector<Value*> coordinates;
  Value* linear = nullptr;
  std::vector<Value*> reduced;
  // Note [Elementwise kernels in aligned chunks]: the first element of an
  // aligned chunk, whose loads and stores of chunk-aligned buffers may carry
  // the chunk's alignment.
  bool chunk_start = false;
};

// Note [Elementwise kernels in aligned chunks] (kernel_emitter.cc): whether
// the kernel has the chunked path, and whether a buffer with `strides` over
// the kernel's iteration space is one the chunks read or write in aligned
// vectors (its last stride 1, every other stride a multiple of the chunk).
bool chunked_elementwise(const KernelSpec& spec);
bool chunk_aligned(const runtime::Shape& strides, const runtime::Shape& shape);

class Emitter {
 public:
  Emitter(const KernelSpec& spec, const EmitOptions& options, llvm::Module& module)
      : spec_(spec),
        options_(options),
        module_(module),
        context_(module.getContext()),
        b_(context_),
        math_(module, options.target == EmitTarget::kNvptx || options.portable_math,
              options.target == EmitTarget::kNvptx) {}

  void emit(const std::string& symbol);

 private:
  bool nvptx() const { return options_.target == EmitTarget::kNvptx; }
  llvm::Type* memory_type(DType dtype);
  llvm::Type* register_type(DType dtype);
  Value* i64(int64_t value) { return b_.getInt64(static_cast<uint64_t>(value)); }
  Value* f32(double value) { return llvm::ConstantFP::get(b_.getFloatTy(), value); }

  // Conversions between register values, and between memory and registers.
  Value* convert(Value* value, DType to);
  // `align_elements`: the access's alignment in elements (1: the element's own).
  Value* load_element(Value* base, DType dtype, Value* offset, DType to,
                      int64_t align_elements = 1);
  void store_element(Value* base, DType dtype, Value* offset, Value* value,
                     int64_t align_elements = 1);
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
  // The per-row outputs at `row_site`, stored only by the thread whose
  // `writer` index is 0 (the row's other threads hold the same totals).
  void store_row_outputs_by(Value* writer, const Site& row_site);
  // The element outputs at `site`, their values evaluated through `memo` here
  // and stored only where `store` holds (Note [Rows held in registers]).
  void store_element_outputs_if(const Site& site, std::vector<Value*>& memo, Value* store);
  // Note [Rows held in registers]: a row of at most a block's length, one
  // element per thread, evaluated once for every reduction and the outputs.
  void emit_rows_in_registers();
  // Note [Short rows held by a warp]: a warp per row, each lane holding its
  // elements (l, l + 32, ...) in registers for every reduction and the outputs.
  void emit_warp_held_rows();
  void emit_elementwise();
  // Note [Elementwise kernels in aligned chunks]: the grid-stride loop over
  // chunks of kElementwiseUnroll consecutive elements.
  void emit_elementwise_chunks(Value* thread_start, Value* stride);
  // Multi-part kernels (kernel_emitter_parts.cc): each part's pointers from
  // the ABI's arguments (Note [Multi-part kernel arguments]), and the tile
  // loop that runs `body` over every part's elements (Note [Multi-part kernels]).
  void split_part_pointers();
  void emit_parts(const LoopBody& body);
  void emit_part_search(Value* tile, const std::vector<size_t>& parts, size_t first, size_t end,
                        const std::vector<int64_t>& first_tile, Value* lane_start, Value* lane_step,
                        const LoopBody& body, llvm::BasicBlock* done);
  void emit_reduction_rows();
  // `reduction`: the reduction's index (Note [One barrier per block reduction]).
  Value* block_reduce(ReduceOp op, Value* partial, size_t reduction);
  Value* warp_reduce(ReduceOp op, Value* value);
  // One pass over the row for reductions [first, end), which read none of each
  // other's results; returns their row totals.
  std::vector<Value*> reduce_row(size_t first, size_t end, Value* element_start,
                                 Value* element_step,
                                 const std::function<Site(Value*)>& element_site);
  Value* special_register(llvm::Intrinsic::ID id);
  std::vector<Value*> part_pointers(const std::vector<Value*>& arguments);

  const KernelSpec& spec_;
  EmitOptions options_;
  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> b_;
  MathEmitter math_;
  llvm::Function* function_ = nullptr;
  std::vector<Value*> inputs_, outputs_, scalars_;
  // Per part (Note [Multi-part kernels]): its input and output pointers.
  std::vector<std::vector<Value*>> part_inputs_, part_outputs_;
  llvm::GlobalVariable* shared_ = nullptr;
};

}  // namespace grove::compiler::codegen::emitter_detail
