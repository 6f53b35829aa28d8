// KernelSpec is the device-independent description of one generated kernel:
// an iteration space, input buffers read with per-dimension strides (0 for a
// broadcast dimension), an expression DAG evaluated per element, optional
// reductions over the innermost iteration dimension, and outputs. Codegen
// lowers the same spec to PTX (cuda) and to a host function (sim, cpu).
//
// Note [Kernel spec reductions]: when `reductions` is non-empty the last
// dimension of `iteration_shape` is reduced. Reductions are evaluated in order
// over each row; the expression of a later reduction (and any output) may read
// the result of an earlier one through kReduced. Outputs with per_row = true
// are written once per row (their shape is iteration_shape without its last
// dimension); other outputs are written per element after the reductions (the
// epilogue), which is how softmax and layer_norm become one kernel.
// Reductions accumulate in f32. On the host a row is reduced sequentially from
// the identity (0 for sum, -inf for max, +inf for min) in increasing index
// order; on cuda each thread of the row's block folds a strided slice, then a
// warp-shuffle / shared-memory tree combines them, so the two agree within
// rounding, not bitwise. max and min propagate NaN.
//
// Note [Kernel ABI]: a generated kernel takes, in this order, one pointer per
// input buffer, one pointer per output, then one f32 per scalar. Each is a
// runtime::KernelArgs slot (8 bytes; an f32 sits in the low 4 bytes, as
// KernelArgs::add_f32 puts it). A pointer is the address of the element at
// index 0 of the iteration space. Shapes and strides are not arguments: they
// are baked into the code as constants, so kernels are specialized per shape
// and cached by signature(). On cuda the kernel is a PTX .entry with those
// parameters; on sim/cpu it is a HostKernelFn reading the same slots.
//
// Note [Kernel spec types]: expression values live in registers as f32, i32,
// i64 or bool. Buffers and outputs may be f32, f16, bf16, f64, i32, i64 or
// bool; kLoad converts the element to the expr's dtype and an output converts
// its expr's value to the output dtype with kCast's rules (float -> int
// truncates toward zero, anything -> bool is != 0, f32 -> bf16/f16 rounds to
// nearest even). Float math (exp, log, tanh, sigmoid, gelu, sqrt, rsqrt, div,
// pow, erf) is f32 only; add/sub/mul/max/min/neg/abs/relu also take i32/i64;
// comparisons take two operands of one dtype and give bool; and/or/not take
// bool. kScalarParam and kReduced are f32, kIndex is i64.
// gelu is the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace grove::compiler::codegen {

enum class ExprOp : uint8_t {
  // leaves
  kLoad,         // inputs[input] at the current index, converted to f32 (or kept integral)
  kConstant,     // `constant`
  kScalarParam,  // scalars[input]: an f32 kernel argument (e.g. a learning rate)
  kReduced,      // the result of reductions[reduction] for the current row
  kIndex,        // the current index along dimension `input` of the iteration space (i64)
  // unary
  kNeg,
  kExp,
  kLog,
  kTanh,
  kSigmoid,
  kRelu,
  kGelu,
  kSqrt,
  kRsqrt,
  kAbs,
  kNot,    // logical not of bool, bitwise not of integers
  kFloor,  // f32 -> f32, rounding toward -inf
  kCeil,   // toward +inf
  kTrunc,  // toward zero
  kRound,  // to nearest, ties to even (PyTorch's round)
  // binary
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kIntDiv,  // integers, truncating toward zero; a zero divisor divides by 1
  kAnd,     // bool, or bitwise on integers (operands and result of one dtype)
  kOr,
  kXor,
  // ternary
  kWhere,  // operands: condition, if-true, if-false
  // conversion
  kCast,  // to `dtype`
  // Note [Kernel spec gathers and randomness]: kLoadAt reads inputs[input] at
  // the element offset given by its one i64 operand (relative to the buffer's
  // pointer; the buffer's strides are unused), which is how embedding picks
  // rows by id; the lowering keeps the offset in bounds. kPhilox gives
  // ops::philox_uniform(seed = operand 0, counter = operand 1) (both i64) as an
  // f32 in [0, 1), bit-identical to compiler/ops/philox.h on every target.
  kLoadAt,
  kPhilox,
  // Note [Erf as one expression] (kernel_math.h): erf of an f32, Abramowitz and
  // Stegun 7.1.26 (|error| < 1.5e-7); unary, kept last so that earlier ops keep
  // their values.
  kErf,
  // Note [Casts to a narrow float round in registers]: f32 -> f32, the value
  // rounded to nearest even in bf16 (or f16: overflow to inf, underflow to
  // subnormals and zero) and widened again. A value cast to bf16/f16 inside a
  // kernel stays f32 in its register (Note [Kernel spec types]); without this
  // rounding, x.half().float() returned x itself (70000, not inf). Appended
  // last, like kErf. Test: EdgeValuesTest.test_casts_to_a_narrow_float_round
  // (tests/python/importer_edge_values_test.py).
  kRoundToBf16,
  kRoundToF16,
};

struct Expr {
  ExprOp op = ExprOp::kConstant;
  runtime::DType dtype = runtime::DType::kF32;  // the value's type (f32 for float math)
  std::vector<int> operands;                    // indices of earlier exprs
  int input = -1;                               // kLoad, kScalarParam, kIndex
  int reduction = -1;                           // kReduced
  double constant = 0;                          // kConstant
};

struct BufferSpec {
  runtime::DType dtype = runtime::DType::kF32;
  // Element strides over iteration_shape (same rank); 0 broadcasts.
  runtime::Shape strides;
  // Multi-part kernels only (Note [Multi-part kernel arguments]): every part
  // reads this input through one pointer, passed once.
  bool shared_by_parts = false;
};

enum class ReduceOp : uint8_t { kSum, kMax, kMin };

struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  int expr = -1;  // evaluated per element of the row, then reduced
};

struct OutputSpec {
  runtime::DType dtype = runtime::DType::kF32;
  int expr = -1;
  bool per_row = false;
  // Element strides over the output's iteration space (iteration_shape, or
  // iteration_shape minus its last dimension when per_row).
  runtime::Shape strides;
  // Multi-part kernels only (Note [Multi-part kernel arguments]): the index of
  // the unshared input whose pointer this output writes through in each part
  // (an in-place update), or -1 for a pointer of its own.
  int in_place_input = -1;
};

// Note [Multi-part kernels]: a spec with `part_sizes` applies its expressions
// to several independent parts in one launch (e.g. one optimizer update for
// every param of a model). Part p has part_sizes[p] elements over a rank-1
// iteration space; iteration_shape is {the largest part size}; every input and
// output stride is 1 (the part's contiguous elements) or 0 (one broadcast
// element); no reductions, and no kIndex / kLoadAt / kPhilox (their values
// would depend on how the work was split). Parts may run concurrently on cuda,
// so no part may read what another writes.
// Each part is cut into tiles of kMultiPartTile elements, numbered part after
// part; on cuda block b runs tile b (one block per tile, up to
// kMaxMultiPartTiles), finds its part by a binary search over the tiles'
// prefix (constants in the code) and runs the part's elements of the tile with
// its pointers; the host kernel runs every tile in order through the same
// search. So the grid covers every part's elements, not just the largest
// part's, and each element is computed by the same expressions as in its own
// kernel (bitwise equal).
//
// Note [Multi-part kernel arguments]: the ABI (Note [Kernel ABI]) of a
// multi-part kernel takes the pointers of its inputs shared_by_parts once, in
// input order; then per part (part 0, part 1, ...) the pointers of its other
// inputs; then per part the pointers of its outputs that are not in place
// (in_place_input < 0); then the scalars (shared by every part). Callers
// (launch(), make_args()) still pass one pointer per input and output of
// every part; make_args drops the repeated ones after checking that they
// repeat (a shared input's pointer is part 0's in every part, an in-place
// output's pointer is its input's). This keeps a step that updates ~100
// params within cuda's 4 KiB of kernel parameters: the hyper-parameters are
// shared and the updated tensors are written in place. Tested by
// HorizontalFusion.* (tests/compiler/lowering/horizontal_fusion_test.cc).
inline constexpr int64_t kMultiPartTile = 1024;
inline constexpr int64_t kMaxMultiPartTiles = (int64_t{1} << 31) - 1;  // cuda's grid.x

struct KernelSpec {
  std::string name;  // a readable prefix: "fused_add_gelu"
  runtime::Shape iteration_shape;
  std::vector<int64_t> part_sizes;  // Note [Multi-part kernels]; empty: one part
  std::vector<BufferSpec> inputs;
  int scalar_count = 0;
  std::vector<Expr> exprs;  // topologically ordered: operands precede users
  std::vector<Reduction> reductions;
  std::vector<OutputSpec> outputs;
  // Note [Warp-per-row reductions]: on cuda a reduction kernel with warp_rows
  // reduces each row with one warp instead of one block (kWarpRowsPerBlock
  // rows per 128-thread block, grid-stride over rows): lane l folds elements
  // l, l + 32, ... and a butterfly of warp shuffles combines the lanes, with no
  // shared memory and no barrier. For short rows and many of them (a small-M
  // GEMM's output columns, compiler/lowering/small_m_gemm.h). The host code is
  // unchanged (a row is reduced sequentially), so only the cuda summation
  // order depends on it; it is part of the signature.
  bool warp_rows = false;
  // With warp_rows: at most this many elements each lane loads per iteration
  // (0: warp_rows_unroll's own count), for kernels whose many reductions would
  // otherwise hold too many loads in registers (Note [Small-M GEMM column
  // tiles]). Results do not depend on it. Part of the signature.
  int64_t warp_rows_max_unroll = 0;
  // Note [Thread-per-row reductions]: on cuda a reduction kernel with
  // thread_rows reduces each row with one thread, which folds the row's
  // elements in increasing order, as the host code does (so cuda's sums equal
  // the host's bitwise), 128 threads per block, grid-stride over rows. For
  // column reductions (sum over the rows of a row-major [M, N]: the kernel's
  // rows are the N columns, adjacent in memory), so a warp's loads of one
  // element index are coalesced; the lowering sets it (Note [Reduction
  // prologues] in compiler/lowering/reduction_prologue.h), and for tiny-K
  // GEMMs (a thread per output: compiler/lowering/tiny_k_gemm.h). A row of up
  // to kMaxThreadRowsUnrolled (32) elements is folded without a loop, its
  // loads in flight together, in the same order. Part of the signature.
  // Tests: TinyKGemm.*,
  // ReductionPrologue.GeluGradientAndItsColumnSumAreOneKernelEqualToTheUnfusedPath (cuda against
  // the host order), ModelPtx.EveryKernelOfBothModelsAndTheirTrainingAssemblesForSm90.
  bool thread_rows = false;

  // Canonical text of everything that affects the generated code; kernels are
  // cached by it.
  std::string signature() const;
  // Throws grove::Error (ShapeError / DTypeError where they fit) naming the
  // first malformed part: the expr, input, reduction or output index, what was
  // expected and what was found.
  void verify() const;

  // Number of rows of a reduction kernel (the product of all but the last
  // iteration dimension), the row length, and the element count.
  int64_t row_count() const;
  int64_t row_length() const;
  int64_t element_count() const;
  // 1 unless part_sizes is set (Note [Multi-part kernels]).
  size_t part_count() const { return part_sizes.empty() ? 1 : part_sizes.size(); }
  // Pointer arguments of the kernel's ABI for its inputs and for its outputs
  // (Note [Multi-part kernel arguments]).
  size_t input_argument_count() const;
  size_t output_argument_count() const;
};

}  // namespace grove::compiler::codegen
