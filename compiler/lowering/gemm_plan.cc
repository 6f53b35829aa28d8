#include "compiler/lowering/gemm_plan.h"

#include <algorithm>
#include <optional>

#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using runtime::DType;

// One operand of a GEMM seen as a row-major or transposed matrix.
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 0;
};

std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                          int64_t col_stride) {
  if (cols == 1 || col_stride == 1) {
    int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<int64_t>(cols, 1)) return MatrixLayout{false, ld};
  }
  if (rows == 1 || row_stride == 1) {
    int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<int64_t>(rows, 1)) return MatrixLayout{true, ld};
  }
  return std::nullopt;
}

// The batch dims of a matmul (C's leading dims): their sizes and each
// operand's strides over them (0 where the operand is broadcast).
struct BatchLayout {
  Shape sizes;
  Shape a_strides, b_strides, c_strides;
};

// How the batch runs: `dims` are the batch dims of size > 1; dims[outer_end..]
// merge into one strided batch of `count` GEMMs, dims[..outer_end] become
// loops of launches.
struct BatchRun {
  std::vector<size_t> dims;
  size_t outer_end = 0;
  int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;

  int64_t loops(const Shape& sizes) const {
    int64_t result = 1;
    for (size_t i = 0; i < outer_end; ++i) result *= sizes[dims[i]];
    return result;
  }
};

// Merge batch dims from the innermost while all three operands stay evenly
// strided; the merged run is one strided-batched GEMM, the rest are loops.
BatchRun merge_batches(const BatchLayout& batch) {
  BatchRun run;
  for (size_t d = 0; d < batch.sizes.size(); ++d) {
    if (batch.sizes[d] != 1) run.dims.push_back(d);
  }
  run.outer_end = run.dims.size();
  if (run.dims.empty()) return run;
  const size_t last = run.dims.back();
  run.count = batch.sizes[last];
  run.stride_a = batch.a_strides[last];
  run.stride_b = batch.b_strides[last];
  run.stride_c = batch.c_strides[last];
  run.outer_end = run.dims.size() - 1;
  while (run.outer_end > 0) {
    const size_t d = run.dims[run.outer_end - 1];
    if (batch.a_strides[d] != run.stride_a * run.count ||
        batch.b_strides[d] != run.stride_b * run.count ||
        batch.c_strides[d] != run.stride_c * run.count) {
      break;
    }
    run.count *= batch.sizes[d];
    --run.outer_end;
  }
  return run;
}

// Plans one GEMM node; each step below is one decision of the plan, in order.
class GemmPlanner {
 public:
  GemmPlanner(const LoweringGraph& graph, const LoweringNode& node, std::vector<SlotInfo>& slots,
              const std::function<int(int)>& contiguous_copy)
      : graph_(graph),
        node_(node),
        slots_(slots),
        contiguous_copy_(contiguous_copy),
        a_(node.operands[0]),
        b_(node.operands[1]),
        c_(node.results[0]),
        dtype_(graph.value(c_).type.dtype) {}

  GemmLaunch plan() {
    check_dtype();
    launch_.args.dtype = dtype_;
    if (node_.transpose_b) {
      plan_linear();
    } else {
      plan_matmul();
    }
    check_inner_dimension();
    attach_epilogue();
    launch_.a_slot = a_;
    launch_.b_slot = b_;
    launch_.c_slot = c_;
    launch_.calls = std::move(calls_);
    return std::move(launch_);
  }

 private:
  // The slot's layout; a reference into `slots_`, so not held across a copy.
  const Layout& layout_of(int slot) const { return slots_[static_cast<size_t>(slot)].layout; }

  runtime::GemmArgs& args() { return launch_.args; }

  void check_dtype() const {
    GROVE_CHECK_AS(
        DTypeError, dtype_ == DType::kF32 || dtype_ == DType::kBF16 || dtype_ == DType::kF16,
        "lowering: node '", node_.name, "' (", node_.op, "): GEMMs take f32, bf16 or f16, ",
        "found ", runtime::dtype_name(dtype_), "; cast the operands first");
  }

  void set_operands(const MatrixLayout& a_matrix, const MatrixLayout& b_matrix) {
    args().transpose_a = a_matrix.transposed, args().lda = a_matrix.ld;
    args().transpose_b = b_matrix.transposed, args().ldb = b_matrix.ld;
  }

  // linear: x [..., K] as [M, K]; weight [N, K] read transposed. One call.
  void plan_linear() {
    const int64_t k = graph_.value(a_).type.shape.back();
    const int64_t n = graph_.value(b_).type.shape[0];
    const int64_t m =
        k == 0 ? 0 : runtime::shape_numel(graph_.value(a_).type.shape) / std::max<int64_t>(k, 1);
    std::optional<Shape> flat = view_strides(layout_of(a_).shape, layout_of(a_).strides, {m, k});
    std::optional<MatrixLayout> a_matrix;
    if (flat) a_matrix = matrix_layout(m, k, (*flat)[0], (*flat)[1]);
    if (!a_matrix) {
      a_ = contiguous_copy_(a_);
      a_matrix = MatrixLayout{false, std::max<int64_t>(k, 1)};
    }
    std::optional<MatrixLayout> b_matrix =
        matrix_layout(k, n, layout_of(b_).strides[1], layout_of(b_).strides[0]);
    if (!b_matrix) {
      b_ = contiguous_copy_(b_);
      b_matrix = matrix_layout(k, n, 1, std::max<int64_t>(k, 1));
    }
    args().m = m, args().n = n, args().k = k;
    set_operands(*a_matrix, *b_matrix);
    args().ldc = std::max<int64_t>(n, 1);
    calls_.push_back(GemmCall{});
  }

  // matmul / batched matmul: A [..., M, K] times B [..., K, N], batch dims
  // broadcast. Folds, merges or loops over the batch, copying operands where
  // that saves launches.
  void plan_matmul() {
    const Shape a_shape = graph_.value(a_).type.shape;
    const Shape b_shape = graph_.value(b_).type.shape;
    const Shape& c_shape = graph_.value(c_).type.shape;
    const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
    const size_t batch_rank = c_shape.size() - 2;
    MatrixLayout a_matrix = operand_matrix(a_, m, k);
    MatrixLayout b_matrix = operand_matrix(b_, k, n);
    BatchLayout batch;
    batch.a_strides = batch_strides(a_, a_shape, batch_rank);
    batch.b_strides = batch_strides(b_, b_shape, batch_rank);
    // C is contiguous, or laid out for its readers (Note [Attention results
    // with heads last]): rows n apart or more, elements adjacent.
    const Layout& c_layout = layout_of(c_);
    const bool c_contiguous = c_layout.is_contiguous();
    Shape c_strides = c_contiguous ? runtime::contiguous_strides(c_shape) : c_layout.strides;
    GROVE_CHECK(c_contiguous || (c_strides.back() == 1 && c_strides[batch_rank] >= n),
                "lowering: node '", node_.name, "': a GEMM cannot write its result through ",
                "strides ", runtime::shape_str(c_strides), " (a grove bug; please report it)");
    batch.c_strides =
        Shape(c_strides.begin(), c_strides.begin() + static_cast<int64_t>(batch_rank));
    batch.sizes = Shape(c_shape.begin(), c_shape.begin() + static_cast<int64_t>(batch_rank));
    args().m = m, args().n = n, args().k = k;
    set_operands(a_matrix, b_matrix);
    args().ldc = c_contiguous ? std::max<int64_t>(n, 1) : c_strides[batch_rank];
    fold_batch_into_rows(a_matrix, m, batch);
    BatchRun run = merge_batches(batch);
    if (copy_unevenly_strided_operands(run, a_shape, b_shape, m, k, n, a_matrix, b_matrix, batch)) {
      set_operands(a_matrix, b_matrix);
      run = merge_batches(batch);
    }
    args().batch_count = run.count, args().stride_a = run.stride_a;
    args().stride_b = run.stride_b, args().stride_c = run.stride_c;
    enumerate_calls(batch, run);
  }

  // The operand in `slot` as a matrix of rows x cols (its last two dims);
  // replaces `slot` by a contiguous copy when no leading dimension describes it.
  MatrixLayout operand_matrix(int& slot, int64_t rows, int64_t cols) {
    const Layout& layout = layout_of(slot);
    size_t r = layout.shape.size();
    std::optional<MatrixLayout> matrix =
        matrix_layout(rows, cols, layout.strides[r - 2], layout.strides[r - 1]);
    if (!matrix) {
      slot = contiguous_copy_(slot);
      matrix = MatrixLayout{false, std::max<int64_t>(cols, 1)};
    }
    return *matrix;
  }

  // The strides of the operand in `slot` (of `shape`) over C's `batch_rank`
  // batch dims, right-aligned; 0 over dims it broadcasts.
  Shape batch_strides(int slot, const Shape& shape, size_t batch_rank) const {
    Shape strides(batch_rank, 0);
    const Layout& layout = layout_of(slot);
    size_t lead = batch_rank - (shape.size() - 2);
    for (size_t d = 0; d + 2 < shape.size(); ++d) {
      if (shape[d] != 1) strides[lead + d] = layout.strides[d];
    }
    return strides;
  }

  // Folds A's batch into M when B is shared by every batch and A's rows are
  // evenly strided across batches (one big GEMM instead of a batch); the
  // batch is then empty.
  void fold_batch_into_rows(const MatrixLayout& a_matrix, int64_t m, BatchLayout& batch) {
    const size_t batch_rank = batch.sizes.size();
    bool b_shared = std::all_of(batch.b_strides.begin(), batch.b_strides.end(),
                                [](int64_t s) { return s == 0; });
    if (!b_shared || a_matrix.transposed || batch_rank == 0 || !layout_of(c_).is_contiguous()) {
      return;
    }
    Shape rows_shape = batch.sizes;
    rows_shape.push_back(m);
    Shape rows_strides = batch.a_strides;
    rows_strides.push_back(a_matrix.ld);
    bool a_full = true;
    for (size_t d = 0; d < batch_rank; ++d) {
      a_full &= batch.sizes[d] == 1 || batch.a_strides[d] != 0;
    }
    std::optional<Shape> merged =
        a_full ? view_strides(rows_shape, rows_strides, {runtime::shape_numel(rows_shape)})
               : std::nullopt;
    if (merged && (runtime::shape_numel(rows_shape) == 1 || (*merged)[0] == a_matrix.ld)) {
      args().m = runtime::shape_numel(rows_shape);
      batch.sizes.clear(), batch.a_strides.clear(), batch.b_strides.clear();
      batch.c_strides.clear();
    }
  }

  // Note [Copies instead of GEMM loops]: an operand whose batch dims are not
  // evenly strided (attention's heads split out of a [B, T, H*D] row:
  // batch strides T*H*D and D) splits the GEMM into a loop of launches, one
  // per outer index (8 GEMMs per attention matmul of gpt4x256 at batch 8).
  // A contiguous copy of such an operand (one small kernel) makes its batch
  // dims merge, and the whole batch runs as one strided-batched GEMM. Worth
  // it while the copy moves less than about 4 MiB per launch it saves; an
  // operand broadcast over some batch dims (stride 0) stays as it is.
  // Returns whether it copied A or B (their matrices and strides updated).
  bool copy_unevenly_strided_operands(const BatchRun& run, const Shape& a_shape,
                                      const Shape& b_shape, int64_t m, int64_t k, int64_t n,
                                      MatrixLayout& a_matrix, MatrixLayout& b_matrix,
                                      BatchLayout& batch) {
    const int64_t loops = run.loops(batch.sizes);
    if (loops <= 1) return false;
    const std::vector<size_t>& dims = run.dims;
    const Shape& sizes = batch.sizes;
    auto uneven = [&](const Shape& strides) {
      for (size_t i = 0; i + 1 < dims.size(); ++i) {
        if (strides[dims[i]] != strides[dims[i + 1]] * sizes[dims[i + 1]]) return true;
      }
      return false;
    };
    auto broadcast = [&](const Shape& strides) {
      return std::any_of(dims.begin(), dims.end(), [&](size_t d) { return strides[d] == 0; });
    };
    const int64_t budget = (loops - 1) * (int64_t{4} << 20);
    auto worth_copying = [&](int slot, const Shape& strides) {
      int64_t bytes = runtime::shape_numel(layout_of(slot).shape) *
                      static_cast<int64_t>(runtime::dtype_size(dtype_));
      return uneven(strides) && !broadcast(strides) && bytes <= budget;
    };
    const size_t batch_rank = sizes.size();
    bool copied = false;
    if (worth_copying(a_, batch.a_strides)) {
      a_ = contiguous_copy_(a_);
      a_matrix = operand_matrix(a_, m, k);
      batch.a_strides = batch_strides(a_, a_shape, batch_rank);
      copied = true;
    }
    if (worth_copying(b_, batch.b_strides)) {
      b_ = contiguous_copy_(b_);
      b_matrix = operand_matrix(b_, k, n);
      batch.b_strides = batch_strides(b_, b_shape, batch_rank);
      copied = true;
    }
    return copied;
  }

  // One call per index of the loop dims, with each operand's element offset.
  void enumerate_calls(const BatchLayout& batch, const BatchRun& run) {
    std::vector<size_t> outer(run.dims.begin(),
                              run.dims.begin() + static_cast<int64_t>(run.outer_end));
    std::vector<int64_t> index(outer.size(), 0);
    while (true) {
      GemmCall call;
      for (size_t i = 0; i < outer.size(); ++i) {
        call.a_offset += index[i] * batch.a_strides[outer[i]];
        call.b_offset += index[i] * batch.b_strides[outer[i]];
        call.c_offset += index[i] * batch.c_strides[outer[i]];
      }
      calls_.push_back(call);
      size_t i = outer.size();
      while (i > 0 && ++index[i - 1] == batch.sizes[outer[i - 1]]) index[--i] = 0;
      if (i == 0) break;
    }
  }

  void check_inner_dimension() {
    const runtime::GemmArgs& g = args();
    GROVE_CHECK_AS(ShapeError, g.k > 0 || g.m == 0 || g.n == 0, "lowering: node '", node_.name,
                   "' (", node_.op,
                   ") has an empty inner dimension (K = 0), which is not supported");
  }

  void attach_epilogue() {
    if (node_.epilogue == runtime::GemmEpilogue::kDGelu) {
      attach_gelu_gradient();
    } else if (node_.epilogue == runtime::GemmEpilogue::kBiasGradA) {
      attach_bias_gradient();
    } else if (node_.epilogue != runtime::GemmEpilogue::kNone) {
      attach_bias();
    }
  }

  // Note [GEMM gelu gradients]: gelu's input (operand 2) read like C.
  void attach_gelu_gradient() {
    runtime::GemmArgs& g = args();
    GROVE_CHECK(
        calls_.size() == 1 && g.batch_count == 1 && layout_of(c_).is_contiguous() && g.ldc % 8 == 0,
        "lowering: node '", node_.name, "': a dgelu GEMM epilogue needs a single GEMM ",
        "with a contiguous result whose rows are a multiple of 8 long (a grove bug; ",
        "please report it)");
    int aux = node_.operands.at(2);
    if (!layout_of(aux).is_contiguous()) aux = contiguous_copy_(aux);
    launch_.aux_slot = aux;
    g.ld_aux = g.ldc;
    g.epilogue = node_.epilogue;
  }

  // Note [Bias gradients from weight-gradient GEMMs]: the bias gradient is
  // the GEMM's second result, written whole (contiguous).
  void attach_bias_gradient() {
    runtime::GemmArgs& g = args();
    launch_.bias_grad_slot = node_.results.at(1);
    GROVE_CHECK(calls_.size() == 1 && g.batch_count == 1 &&
                    layout_of(launch_.bias_grad_slot).is_contiguous(),
                "lowering: node '", node_.name, "': a bias-gradient GEMM epilogue needs a single ",
                "GEMM and a contiguous bias gradient (a grove bug; please report it)");
    g.epilogue = node_.epilogue;
  }

  // Note [GEMM epilogues in lowering]: one row-major GEMM, bias contiguous.
  void attach_bias() {
    runtime::GemmArgs& g = args();
    GROVE_CHECK(calls_.size() == 1 && g.batch_count == 1, "lowering: node '", node_.name,
                "': a GEMM epilogue needs a single GEMM (a grove bug; please report it)");
    int bias = node_.operands.at(2);
    const Layout& bias_layout = layout_of(bias);
    if (!(bias_layout.shape.size() == 1 &&
          (bias_layout.shape[0] <= 1 || bias_layout.strides[0] == 1))) {
      bias = contiguous_copy_(bias);
    }
    g.epilogue = node_.epilogue;
    launch_.bias_slot = bias;
    launch_.exact_gelu = node_.exact_gelu;
    if (node_.epilogue == runtime::GemmEpilogue::kBiasGeluAux) {
      // Note [GEMM auxiliary output in lowering]: the aux matrix is laid out like C.
      launch_.aux_slot = node_.results.at(1);
      const Layout& aux_layout = layout_of(launch_.aux_slot);
      GROVE_CHECK(aux_layout.is_contiguous() && layout_of(c_).is_contiguous() && g.ldc % 8 == 0,
                  "lowering: node '", node_.name, "': the pre-activation output of a ",
                  "bias_gelu_aux GEMM must be contiguous with a row length divisible by 8 ",
                  "(a grove bug; please report it)");
      g.ld_aux = g.ldc;
    }
  }

  const LoweringGraph& graph_;
  const LoweringNode& node_;
  std::vector<SlotInfo>& slots_;
  const std::function<int(int)>& contiguous_copy_;
  int a_;
  int b_;
  const int c_;
  const DType dtype_;
  GemmLaunch launch_;
  std::vector<GemmCall> calls_;
};

}  // namespace

GemmLaunch plan_gemm(const LoweringGraph& graph, const LoweringNode& node,
                     std::vector<SlotInfo>& slots, const std::function<int(int)>& contiguous_copy) {
  return GemmPlanner(graph, node, slots, contiguous_copy).plan();
}

}  // namespace grove::compiler::lowering
