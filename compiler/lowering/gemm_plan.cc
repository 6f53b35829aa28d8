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

}  // namespace

GemmLaunch plan_gemm(const LoweringGraph& graph, const LoweringNode& node,
                     std::vector<SlotInfo>& slots, const std::function<int(int)>& contiguous_copy) {
  int a = node.operands[0];
  int b = node.operands[1];
  const int c = node.results[0];
  const Shape& c_shape = graph.value(c).type.shape;
  const DType dtype = graph.value(c).type.dtype;
  GROVE_CHECK_AS(DTypeError, dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "lowering: node '", node.name, "' (", node.op, "): GEMMs take f32, bf16 or f16, ",
                 "found ", runtime::dtype_name(dtype), "; cast the operands first");
  auto layout_of = [&](int slot) -> const Layout& {
    return slots[static_cast<size_t>(slot)].layout;
  };
  GemmLaunch launch;
  runtime::GemmArgs& g = launch.args;
  g.dtype = dtype;
  std::vector<GemmCall> calls;
  if (node.transpose_b) {
    // linear: x [..., K] as [M, K]; weight [N, K] read transposed.
    const int64_t k = graph.value(a).type.shape.back();
    const int64_t n = graph.value(b).type.shape[0];
    const int64_t m =
        k == 0 ? 0 : runtime::shape_numel(graph.value(a).type.shape) / std::max<int64_t>(k, 1);
    std::optional<Shape> flat = view_strides(layout_of(a).shape, layout_of(a).strides, {m, k});
    std::optional<MatrixLayout> a_matrix;
    if (flat) a_matrix = matrix_layout(m, k, (*flat)[0], (*flat)[1]);
    if (!a_matrix) {
      a = contiguous_copy(a);
      a_matrix = MatrixLayout{false, std::max<int64_t>(k, 1)};
    }
    std::optional<MatrixLayout> b_matrix =
        matrix_layout(k, n, layout_of(b).strides[1], layout_of(b).strides[0]);
    if (!b_matrix) {
      b = contiguous_copy(b);
      b_matrix = matrix_layout(k, n, 1, std::max<int64_t>(k, 1));
    }
    g.m = m, g.n = n, g.k = k;
    g.transpose_a = a_matrix->transposed, g.lda = a_matrix->ld;
    g.transpose_b = b_matrix->transposed, g.ldb = b_matrix->ld;
    g.ldc = std::max<int64_t>(n, 1);
    calls.push_back(GemmCall{});
  } else {
    const Shape a_shape = graph.value(a).type.shape;
    const Shape b_shape = graph.value(b).type.shape;
    const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
    const size_t batch_rank = c_shape.size() - 2;
    auto batch_strides = [&](int slot, const Shape& shape) {
      Shape strides(batch_rank, 0);
      const Layout& layout = layout_of(slot);
      size_t lead = batch_rank - (shape.size() - 2);
      for (size_t d = 0; d + 2 < shape.size(); ++d) {
        if (shape[d] != 1) strides[lead + d] = layout.strides[d];
      }
      return strides;
    };
    auto matrix_of = [&](int& slot, int64_t rows, int64_t cols) {
      const Layout& layout = layout_of(slot);
      size_t r = layout.shape.size();
      std::optional<MatrixLayout> matrix =
          matrix_layout(rows, cols, layout.strides[r - 2], layout.strides[r - 1]);
      if (!matrix) {
        slot = contiguous_copy(slot);
        matrix = MatrixLayout{false, std::max<int64_t>(cols, 1)};
      }
      return *matrix;
    };
    MatrixLayout a_matrix = matrix_of(a, m, k);
    MatrixLayout b_matrix = matrix_of(b, k, n);
    Shape sa = batch_strides(a, a_shape), sb = batch_strides(b, b_shape);
    Shape c_strides = runtime::contiguous_strides(c_shape);
    Shape sc(c_strides.begin(), c_strides.begin() + static_cast<int64_t>(batch_rank));
    Shape sizes(c_shape.begin(), c_shape.begin() + static_cast<int64_t>(batch_rank));
    g.m = m, g.n = n, g.k = k;
    g.transpose_a = a_matrix.transposed, g.lda = a_matrix.ld;
    g.transpose_b = b_matrix.transposed, g.ldb = b_matrix.ld;
    g.ldc = std::max<int64_t>(n, 1);
    // Fold A's batch into M when B is shared by every batch and A's rows are
    // evenly strided across batches (one big GEMM instead of a batch).
    bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; });
    if (b_shared && !a_matrix.transposed && batch_rank > 0) {
      Shape rows_shape = sizes;
      rows_shape.push_back(m);
      Shape rows_strides = sa;
      rows_strides.push_back(a_matrix.ld);
      bool a_full = true;
      for (size_t d = 0; d < batch_rank; ++d) a_full &= sizes[d] == 1 || sa[d] != 0;
      std::optional<Shape> merged =
          a_full ? view_strides(rows_shape, rows_strides, {runtime::shape_numel(rows_shape)})
                 : std::nullopt;
      if (merged && (runtime::shape_numel(rows_shape) == 1 || (*merged)[0] == a_matrix.ld)) {
        g.m = runtime::shape_numel(rows_shape);
        sizes.clear(), sa.clear(), sb.clear(), sc.clear();
      }
    }
    // Merge batch dims from the innermost while all three operands stay evenly
    // strided; the merged run is one strided-batched GEMM, the rest are loops.
    std::vector<size_t> dims;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] != 1) dims.push_back(d);
    }
    int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
    size_t outer_end = dims.size();
    auto merge_batches = [&] {
      batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
      outer_end = dims.size();
      if (dims.empty()) return;
      size_t last = dims.back();
      batch = sizes[last], stride_a = sa[last], stride_b = sb[last], stride_c = sc[last];
      outer_end = dims.size() - 1;
      while (outer_end > 0) {
        size_t d = dims[outer_end - 1];
        if (sa[d] != stride_a * batch || sb[d] != stride_b * batch || sc[d] != stride_c * batch) {
          break;
        }
        batch *= sizes[d];
        --outer_end;
      }
    };
    merge_batches();
    // Note [Copies instead of GEMM loops]: an operand whose batch dims are not
    // evenly strided (attention's heads split out of a [B, T, H*D] row:
    // batch strides T*H*D and D) splits the GEMM into a loop of launches, one
    // per outer index (8 GEMMs per attention matmul of gpt4x256 at batch 8).
    // A contiguous copy of such an operand (one small kernel) makes its batch
    // dims merge, and the whole batch runs as one strided-batched GEMM. Worth
    // it while the copy moves less than about 4 MiB per launch it saves; an
    // operand broadcast over some batch dims (stride 0) stays as it is.
    int64_t loops = 1;
    for (size_t i = 0; i < outer_end; ++i) loops *= sizes[dims[i]];
    if (loops > 1) {
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
                        static_cast<int64_t>(runtime::dtype_size(dtype));
        return uneven(strides) && !broadcast(strides) && bytes <= budget;
      };
      bool copied = false;
      if (worth_copying(a, sa)) {
        a = contiguous_copy(a);
        a_matrix = matrix_of(a, m, k);
        sa = batch_strides(a, a_shape);
        copied = true;
      }
      if (worth_copying(b, sb)) {
        b = contiguous_copy(b);
        b_matrix = matrix_of(b, k, n);
        sb = batch_strides(b, b_shape);
        copied = true;
      }
      if (copied) {
        g.transpose_a = a_matrix.transposed, g.lda = a_matrix.ld;
        g.transpose_b = b_matrix.transposed, g.ldb = b_matrix.ld;
        merge_batches();
      }
    }
    g.batch_count = batch, g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
    std::vector<size_t> outer(dims.begin(), dims.begin() + static_cast<int64_t>(outer_end));
    std::vector<int64_t> index(outer.size(), 0);
    while (true) {
      GemmCall call;
      for (size_t i = 0; i < outer.size(); ++i) {
        call.a_offset += index[i] * sa[outer[i]];
        call.b_offset += index[i] * sb[outer[i]];
        call.c_offset += index[i] * sc[outer[i]];
      }
      calls.push_back(call);
      size_t i = outer.size();
      while (i > 0 && ++index[i - 1] == sizes[outer[i - 1]]) index[--i] = 0;
      if (i == 0) break;
    }
  }
  GROVE_CHECK_AS(ShapeError, g.k > 0 || g.m == 0 || g.n == 0, "lowering: node '", node.name, "' (",
                 node.op, ") has an empty inner dimension (K = 0), which is not supported");
  if (node.epilogue == runtime::GemmEpilogue::kDGelu) {
    // Note [GEMM gelu gradients]: gelu's input (operand 2) read like C.
    GROVE_CHECK(
        calls.size() == 1 && g.batch_count == 1 && layout_of(c).is_contiguous() && g.ldc % 8 == 0,
        "lowering: node '", node.name, "': a dgelu GEMM epilogue needs a single GEMM ",
        "with a contiguous result whose rows are a multiple of 8 long (a grove bug; ",
        "please report it)");
    int aux = node.operands.at(2);
    if (!layout_of(aux).is_contiguous()) aux = contiguous_copy(aux);
    launch.aux_slot = aux;
    g.ld_aux = g.ldc;
    g.epilogue = node.epilogue;
  } else if (node.epilogue == runtime::GemmEpilogue::kBiasGradA) {
    // Note [Bias gradients from weight-gradient GEMMs]: the bias gradient is
    // the GEMM's second result, written whole (contiguous).
    launch.bias_grad_slot = node.results.at(1);
    GROVE_CHECK(
        calls.size() == 1 && g.batch_count == 1 && layout_of(launch.bias_grad_slot).is_contiguous(),
        "lowering: node '", node.name, "': a bias-gradient GEMM epilogue needs a single ",
        "GEMM and a contiguous bias gradient (a grove bug; please report it)");
    g.epilogue = node.epilogue;
  } else if (node.epilogue != runtime::GemmEpilogue::kNone) {
    // Note [GEMM epilogues in lowering]: one row-major GEMM, bias contiguous.
    GROVE_CHECK(calls.size() == 1 && g.batch_count == 1, "lowering: node '", node.name,
                "': a GEMM epilogue needs a single GEMM (a grove bug; please report it)");
    int bias = node.operands.at(2);
    const Layout& bias_layout = layout_of(bias);
    if (!(bias_layout.shape.size() == 1 &&
          (bias_layout.shape[0] <= 1 || bias_layout.strides[0] == 1))) {
      bias = contiguous_copy(bias);
    }
    g.epilogue = node.epilogue;
    launch.bias_slot = bias;
    if (node.epilogue == runtime::GemmEpilogue::kBiasGeluAux) {
      // Note [GEMM auxiliary output in lowering]: the aux matrix is laid out like C.
      launch.aux_slot = node.results.at(1);
      const Layout& aux_layout = layout_of(launch.aux_slot);
      GROVE_CHECK(aux_layout.is_contiguous() && layout_of(c).is_contiguous() && g.ldc % 8 == 0,
                  "lowering: node '", node.name, "': the pre-activation output of a ",
                  "bias_gelu_aux GEMM must be contiguous with a row length divisible by 8 ",
                  "(a grove bug; please report it)");
      g.ld_aux = g.ldc;
    }
  }
  launch.a_slot = a;
  launch.b_slot = b;
  launch.c_slot = c;
  launch.calls = std::move(calls);
  return launch;
}

}  // namespace grove::compiler::lowering
