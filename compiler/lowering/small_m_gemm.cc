#include "compiler/lowering/small_m_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_builder.h"
#include "compiler/lowering/gemm_kernel_tuning.h"
#include "compiler/ops/op_helpers.h"
#include "compiler/ops/op_registry.h"
#include "runtime/blas.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using codegen::ExprOp;
using codegen::ReduceOp;
using runtime::DType;
using runtime::GemmArgs;
using runtime::GemmEpilogue;

bool has_gelu(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kBiasGelu || epilogue == GemmEpilogue::kBiasGeluAux;
}

}  // namespace

bool gemm_epilogue_has_bias(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kBias || epilogue == GemmEpilogue::kBiasGelu ||
         epilogue == GemmEpilogue::kBiasGeluAux || epilogue == GemmEpilogue::kBiasRelu;
}

bool gemm_epilogue_is_pointwise_on_c(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kNone || epilogue == GemmEpilogue::kBias ||
         epilogue == GemmEpilogue::kBiasGelu || epilogue == GemmEpilogue::kBiasRelu;
}

bool gemm_launch_is_one_plain_call(const GemmLaunch& launch) {
  const GemmArgs& g = launch.args;
  return launch.calls.size() == 1 && g.batch_count == 1 && g.alpha == 1.0f && g.beta == 0.0f &&
         (g.dtype == DType::kF32 || g.dtype == DType::kBF16 || g.dtype == DType::kF16) &&
         launch.calls[0].a_offset == 0 && launch.calls[0].b_offset == 0 &&
         launch.calls[0].c_offset == 0;
}

// Note [Small-M GEMM column tiles]: GROVE_SMALL_M_COLUMN_TILES=0 measures
// single-column variants only (under a key of their own, for A/Bs in one process).
bool small_m_column_tiles_enabled() {
  const char* value = std::getenv("GROVE_SMALL_M_COLUMN_TILES");
  return value == nullptr || std::string(value) != "0";
}

SmallMGemmMode small_m_gemm_mode(std::optional<SmallMGemmMode> requested) {
  if (requested) return *requested;
  const char* value = std::getenv("GROVE_SMALL_M_GEMM");
  return parse_small_m_gemm_mode(value == nullptr ? "" : value, "GROVE_SMALL_M_GEMM");
}

SmallMGemmMode parse_small_m_gemm_mode(const std::string& text, const std::string& source) {
  if (text.empty() || text == "auto") return SmallMGemmMode::kAuto;
  if (text == "on") return SmallMGemmMode::kOn;
  if (text == "off") return SmallMGemmMode::kOff;
  throw ConfigError(str_cat(source, "='", text,
                            "': expected off (library GEMMs only), on (grove's small-M kernel "
                            "for every GEMM with M <= ",
                            kMaxSmallM, ") or auto (the default: measured per GPU and shape)"));
}

namespace {

// GROVE_SMALL_M_PAST_32=0 keeps GEMMs of 33 to 64 rows on the library
// without measuring, for A/Bs (Note [Small-M GEMMs measured past 32 rows]).
bool measured_past_32_rows() {
  const char* value = std::getenv("GROVE_SMALL_M_PAST_32");
  return value == nullptr || std::string(value) != "0";
}

bool qualifies_up_to(const GemmLaunch& launch, int64_t most_rows) {
  const GemmArgs& g = launch.args;
  const bool epilogue = g.epilogue == GemmEpilogue::kNone || gemm_epilogue_has_bias(g.epilogue) ||
                        (g.epilogue == GemmEpilogue::kDGelu && launch.aux_slot >= 0);
  return gemm_launch_is_one_plain_call(launch) && g.m >= 1 && g.m <= most_rows && g.n >= 1 &&
         g.k >= 1 && epilogue && (!gemm_epilogue_has_bias(g.epilogue) || launch.bias_slot >= 0) &&
         (g.epilogue != GemmEpilogue::kBiasGeluAux || launch.aux_slot >= 0);
}

}  // namespace

bool small_m_gemm_qualifies(const GemmLaunch& launch) {
  return qualifies_up_to(launch, kMaxSmallM);
}

std::optional<runtime::SmallMTile> forced_small_m_tile() {
  const char* value = std::getenv("GROVE_SMALL_M_TILED");
  const std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "1" || text == "0") return std::nullopt;
  for (const runtime::SmallMTile& tile : runtime::small_m_tiled_gemm_tiles()) {
    if (text == str_cat(tile.rows, 'x', tile.columns))
      return runtime::SmallMTile{tile.rows, tile.columns, 0};
    if (text == str_cat(tile.rows, 'x', tile.columns, 'x', tile.warps)) return tile;
  }
  std::string tiles;
  for (const runtime::SmallMTile& tile : runtime::small_m_tiled_gemm_tiles()) {
    tiles += str_cat(tiles.empty() ? "" : ", ", tile.rows, 'x', tile.columns, 'x', tile.warps);
  }
  throw ConfigError(
      str_cat("GROVE_SMALL_M_TILED='", text,
              "': expected 1 (the default: cuda's tiled small-M kernel is timed "
              "with the others), 0 (never) or one of its tiles to force, RxC (warps from K) "
              "or RxCxW (",
              tiles, ")"));
}

bool small_m_tiled_kn_enabled() {
  const char* value = std::getenv("GROVE_SMALL_M_TILED_KN");
  return value == nullptr || std::string(value) != "0";
}

bool small_m_tiled_qualifies(const GemmLaunch& launch) {
  return qualifies_up_to(launch, kMaxMeasuredSmallM) &&
         (runtime::small_m_tiled_gemm_qualifies(launch.args) ||
          (small_m_tiled_kn_enabled() && runtime::small_m_tiled_gemm_kn_qualifies(launch.args))) &&
         (!launch.exact_gelu || launch.args.epilogue == GemmEpilogue::kBias);
}

bool small_n_tiled_enabled() {
  const char* value = std::getenv("GROVE_SMALL_M_TILED_TRANSPOSED");
  return value != nullptr && std::string(value) == "1";
}

bool small_n_tiled_qualifies(const GemmLaunch& launch) {
  return small_n_tiled_enabled() && small_n_gemm_qualifies(launch) &&
         runtime::small_n_tiled_gemm_qualifies(launch.args);
}

namespace {

// Note [Small-M tiled GEMM]: the tile GROVE_SMALL_M_TILED forces for `launch`
// on a cuda device (elsewhere the host GEMM would run, which applies no exact
// gelu), unless the mode is off.
SmallMVariant forced_tiled_variant(const GemmLaunch& launch, runtime::Device device,
                                   std::optional<SmallMGemmMode> requested) {
  const std::optional<runtime::SmallMTile> tile = forced_small_m_tile();
  if (!tile || !device.is_cuda() || small_m_gemm_mode(requested) == SmallMGemmMode::kOff ||
      !small_m_tiled_qualifies(launch)) {
    return {};
  }
  return {tile->rows, tile->columns, /*tiled=*/true, tile->warps};
}

}  // namespace

bool small_m_gemm_heuristic(const GemmArgs& args) {
  const int64_t weight_bytes =
      args.n * args.k * static_cast<int64_t>(runtime::dtype_size(args.dtype));
  const bool read_along_k = args.transpose_b || args.n == 1;
  return args.m <= 8 && read_along_k && weight_bytes <= (int64_t{8} << 20);
}

std::string small_m_gemm_tuning_key(const std::string& gpu, const GemmArgs& args) {
  return str_cat(gpu, '|', runtime::dtype_name(args.dtype), "|m=", args.m, ",n=", args.n,
                 ",k=", args.k, "|ta=", args.transpose_a ? 1 : 0, ",tb=", args.transpose_b ? 1 : 0,
                 '|', runtime::gemm_epilogue_name(args.epilogue), "|v", kSmallMKernelVersion);
}

// Note [Small-M GEMM kernel]: C[m, n] = epilogue(sum_k A[m, k] B[n, k]) as a
// reduction kernel over the iteration space [G, N, K]: the M rows of A are cut
// into G groups of M / G (small_m_rows_per_warp: at most 8), and each row
// (g, n) of the kernel computes its group's M / G sums in one pass over K
// (Note [Kernel spec reductions]), with warp_rows (Note [Warp-per-row
// reductions]): on cuda one warp per (group, output column) reads B's row n,
// coalesced when B is K-contiguous (linear's weight), and its group's rows of
// A (small: L1-resident) through load_at. Groups give M = 32 four times the
// warps, each with a quarter of the accumulators and loads: gpt4x256's
// 32-token GEMMs ran on 64 of the H100's 132 SMs with one group. Output m of
// row (g, n) is written at C + (g * M / G + m) * ldc + n (and the
// pre-activation at aux likewise for bias_gelu_aux; dgelu reads gelu's input
// at aux's same place and multiplies by its gelu'). Sums accumulate in f32 in
// increasing k per lane, so results differ from the library GEMM's within
// rounding, never between eager and cudagraphs (the same kernel runs in both).
// Tests: SmallMGemmOnDevice.* (the float64 reference, M up to 32),
// SmallMGemmKernel.* (groups, PTX).
namespace {

// The largest divisor of m that is at most `most` (1 at least).
int64_t largest_divisor_up_to(int64_t m, int64_t most) {
  for (int64_t rows = std::min(m, most); rows > 1; --rows) {
    if (m % rows == 0) return rows;
  }
  return 1;
}

}  // namespace

int64_t small_m_rows_per_warp(int64_t m) { return largest_divisor_up_to(m, kSmallMRowsPerWarp); }

std::vector<int64_t> small_m_row_variants(int64_t m) {
  std::vector<int64_t> variants;
  for (int64_t most : {kSmallMRowsPerWarp, int64_t{4}, int64_t{2}}) {
    const int64_t rows = largest_divisor_up_to(m, most);
    if (std::find(variants.begin(), variants.end(), rows) == variants.end()) {
      variants.push_back(rows);
    }
  }
  return variants;
}

// Note [Small-M GEMM column tiles]: a warp of the plain kernel loads `rows`
// values of A for each weight value it loads, and A's loads (L1 hits, one
// instruction each) bound the kernel where the weights are small; a warp that
// computes kSmallMColumnTile columns of C loads each value of A once for all
// of them (rows + columns loads for rows x columns products instead of
// rows + 1 for rows). Auto measures each row variant with and without column
// tiles (GROVE_SMALL_M_COLUMN_TILES=0: without, for A/Bs). Sums still fold k in
// increasing order per lane. Tests: SmallMGemmKernel.ColumnTilesMatchTheReference
// (sim, both forms and both weight layouts; ptxas).

std::vector<SmallMVariant> small_m_variants(int64_t m, int64_t n) {
  std::vector<SmallMVariant> variants;
  for (int64_t rows : small_m_row_variants(m)) variants.push_back({rows, 1});
  if (small_m_column_tiles_enabled() && n % kSmallMColumnTile == 0) {
    for (int64_t rows : small_m_row_variants(m)) variants.push_back({rows, kSmallMColumnTile});
  }
  return variants;
}

// Note [Small-N GEMMs as their transpose]: a GEMM with many rows and few
// columns (MLP-Mixer's token-mixing fc2: C [512, 16] = h [512, 256] W2^T at
// batch 1, three library kernels) is the small-M product of its transpose,
// C^T [n, m] = op(B)^T op(A)^T: the N columns of C become the kernel's rows
// (weights, read through load_at and L1-resident) and the M rows of C its
// warp-per-row columns, each warp reading one row of A coalesced (so A must be
// K-contiguous: not transpose_a). C keeps its layout: output j of row (g, i)
// is written at C + i * ldc + g * rows + j, and the bias (one per column of C)
// is read per accumulator. Sums still fold k in increasing order per lane.
// Auto measures it against the library like a 33-64 row GEMM (Note [Small-M
// GEMMs measured past 32 rows]); GROVE_SMALL_N_GEMM=0 keeps the library.
// Tests: SmallMGemmKernel.TransposedFormMatchesTheReferenceInEveryVariant (sim),
// SmallMGemmSelection.TransposedFormIsMeasuredOnlyOnCuda.
namespace {

// The transpose's arguments: m and n, A and B (and their layouts) swapped.
GemmArgs transposed_args(const GemmArgs& g) {
  GemmArgs t = g;
  t.m = g.n;
  t.n = g.m;
  t.transpose_a = !g.transpose_b;
  t.lda = g.ldb;
  t.transpose_b = !g.transpose_a;
  t.ldb = g.lda;
  return t;
}

}  // namespace

bool small_n_gemm_qualifies(const GemmLaunch& launch) {
  const GemmArgs& g = launch.args;
  return gemm_launch_is_one_plain_call(launch) && g.m > kMaxMeasuredSmallM && g.n >= 1 &&
         g.n <= kMaxMeasuredSmallM && g.k >= 1 && !g.transpose_a &&
         gemm_epilogue_is_pointwise_on_c(g.epilogue) && !launch.exact_gelu &&
         (!gemm_epilogue_has_bias(g.epilogue) || launch.bias_slot >= 0);
}

AssembledKernel small_m_gemm_kernel(const GemmLaunch& launch, int64_t rows_per_warp,
                                    bool transposed, int64_t columns) {
  GROVE_CHECK(
      transposed ? small_n_gemm_qualifies(launch) : qualifies_up_to(launch, kMaxMeasuredSmallM),
      "small-M GEMM: ", small_m_gemm_tuning_key("", launch.args), transposed ? " (transposed)" : "",
      " does not qualify for grove's kernel (a grove bug; please report it)");
  // The product the kernel computes (C^T's when transposed) and its operands'
  // slots: its A is the weight-like operand read through load_at.
  const GemmArgs g = transposed ? transposed_args(launch.args) : launch.args;
  const int a_slot = transposed ? launch.b_slot : launch.a_slot;
  const int b_slot = transposed ? launch.a_slot : launch.b_slot;
  // Where output (row m, column n) of the product lies in C: m * ldc + n, or
  // n * ldc + m for the transpose.
  const int64_t c_row_stride = transposed ? 1 : g.ldc;
  const int64_t c_column_stride = transposed ? g.ldc : 1;
  const int64_t rows = rows_per_warp == 0 ? small_m_rows_per_warp(g.m) : rows_per_warp;
  GROVE_CHECK(rows >= 1 && rows <= kSmallMRowsPerWarp && g.m % rows == 0, "small-M GEMM: ", rows,
              " rows per warp do not divide M = ", g.m, " (a grove bug; please report it)");
  GROVE_CHECK(columns >= 1 && columns <= kSmallMColumnTile && g.n % columns == 0,
              "small-M GEMM: ", columns, " columns per warp do not divide N = ", g.n,
              " (a grove bug; please report it)");
  std::string name = transposed ? "small_n_gemm" : "small_m_gemm";
  if (g.epilogue != GemmEpilogue::kNone)
    name += str_cat('_', runtime::gemm_epilogue_name(g.epilogue));
  if (launch.exact_gelu) name += "_exact_gelu";
  if (columns > 1) name += str_cat("_c", columns);
  const int64_t groups = g.m / rows;
  codegen::KernelBuilder b(name, {groups, g.n / columns, g.k});
  AssembledKernel out;
  const int a = b.input(g.dtype, {0, 0, 0});  // read through load_at
  out.input_slots.push_back(a_slot);
  // Note [Small-M GEMM column tiles]: with several columns a warp reads its
  // weight rows through load_at.
  const int w = columns > 1     ? b.input(g.dtype, {0, 0, 0})
                : g.transpose_b ? b.input(g.dtype, {0, g.ldb, 1})
                                : b.input(g.dtype, {0, 1, g.ldb});
  out.input_slots.push_back(b_slot);
  int bias = -1;
  if (gemm_epilogue_has_bias(g.epilogue)) {
    // One per column of C: per column of the product, or per row of the transpose's.
    bias = b.input(g.dtype,
                   transposed || columns > 1 ? runtime::Shape{0, 0, 0} : runtime::Shape{0, 1, 0});
    out.input_slots.push_back(launch.bias_slot);
  }
  int gelu_input = -1;  // kDGelu: read through load_at at each output's place
  if (g.epilogue == GemmEpilogue::kDGelu) {
    gelu_input = b.input(g.dtype, {0, 0, 0});
    out.input_slots.push_back(launch.aux_slot);
  }
  auto i64 = [&](int64_t value) { return b.constant(static_cast<double>(value), DType::kI64); };
  auto plus = [&](int expr, int64_t value) {
    return value == 0 ? expr : b.binary(ExprOp::kAdd, expr, i64(value));
  };
  const int k = b.index(2);
  const int a_column = g.transpose_a ? b.binary(ExprOp::kMul, k, i64(g.lda)) : k;
  const int64_t a_row_stride = g.transpose_a ? 1 : g.lda;
  // Where this row's group of A's rows begins.
  const int a_group = groups == 1
                          ? a_column
                          : b.binary(ExprOp::kAdd, a_column,
                                     b.binary(ExprOp::kMul, b.index(0), i64(rows * a_row_stride)));
  // The first of this row's columns of the product.
  const int first_column =
      columns > 1 ? b.binary(ExprOp::kMul, b.index(1), i64(columns)) : b.index(1);
  std::vector<int> weights;
  if (columns == 1) {
    weights.push_back(b.load(w));
  } else {
    const int64_t b_column_stride = g.transpose_b ? g.ldb : 1;
    const int w_first =
        b.binary(ExprOp::kAdd, b.binary(ExprOp::kMul, first_column, i64(b_column_stride)),
                 g.transpose_b ? k : b.binary(ExprOp::kMul, k, i64(g.ldb)));
    for (int64_t c = 0; c < columns; ++c) {
      weights.push_back(b.load_at(w, plus(w_first, c * b_column_stride)));
    }
  }
  // sums[m * columns + c]: row m of the group, column c of the tile.
  std::vector<int> sums;
  for (int64_t m = 0; m < rows; ++m) {
    const int a_value = b.load_at(a, plus(a_group, m * a_row_stride));
    for (int weight : weights) {
      sums.push_back(b.reduce(ReduceOp::kSum, b.binary(ExprOp::kMul, a_value, weight)));
    }
  }
  // The bias of each column (of C: per column of the product, or per row of
  // the transpose's).
  auto bias_of = [&](int64_t m, int64_t c) {
    if (bias < 0) return -1;
    if (transposed) return b.load_at(bias, plus(b.binary(ExprOp::kMul, b.index(0), i64(rows)), m));
    return columns > 1 ? b.load_at(bias, plus(first_column, c)) : b.load(bias);
  };
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t c = 0; c < columns; ++c) {
      int value = b.reduced(sums[static_cast<size_t>(m * columns + c)]);
      if (const int bias_value = bias_of(m, c); bias_value >= 0) {
        value = b.binary(ExprOp::kAdd, value, bias_value);
      }
      if (gelu_input >= 0) {
        // kDGelu: gelu's input at this output's place (row g * rows + m, its column).
        const int row_start = b.binary(ExprOp::kMul, b.index(0), i64(rows * g.ld_aux));
        const int at = plus(b.binary(ExprOp::kAdd, row_start, first_column), m * g.ld_aux + c);
        value = ops::emit_gelu_backward(b, value, b.load_at(gelu_input, at));
      }
      const int pre_activation = value;
      if (has_gelu(g.epilogue)) value = b.unary(ExprOp::kGelu, value);
      if (g.epilogue == GemmEpilogue::kBiasRelu) value = b.unary(ExprOp::kRelu, value);
      if (launch.exact_gelu) {
        // Note [Exact gelu in the small-M GEMM]: the importer's expression, in
        // its order, on f32 constants as its scalars are.
        const int scaled =
            b.binary(ExprOp::kMul, value, b.constant(0.7071067811865476, DType::kF32));
        const int erf = ops::OpRegistry::global().get("erf").elementwise_expr(b, {scaled}, {})[0];
        const int one_plus = b.binary(ExprOp::kAdd, erf, b.constant(1.0, DType::kF32));
        value = b.binary(ExprOp::kMul, b.binary(ExprOp::kMul, value, b.constant(0.5, DType::kF32)),
                         one_plus);
      }
      b.output(value, g.dtype, {rows * c_row_stride, columns * c_column_stride},
               /*per_row=*/true);
      out.output_slots.push_back(launch.c_slot);
      out.output_offsets.push_back(m * c_row_stride + c * c_column_stride);
      if (g.epilogue == GemmEpilogue::kBiasGeluAux) {
        b.output(pre_activation, g.dtype, {rows * g.ld_aux, columns}, /*per_row=*/true);
        out.output_slots.push_back(launch.aux_slot);
        out.output_offsets.push_back(m * g.ld_aux + c);
      }
    }
  }
  b.spec().warp_rows = true;
  // Note [Small-M GEMM column tiles]: about 128 loads in flight per lane at most.
  if (columns > 1) b.spec().warp_rows_max_unroll = std::max<int64_t>(1, 128 / (rows * columns));
  out.spec = b.build();
  return out;
}

// Note [Small-M GEMM selection]: the mode is the compile's own option when it
// gives one (the C API's "small_m_gemm", CompileOptions::small_m_gemm: the
// torch door asks for on when a decode graph binds its moved cache per call,
// Note [Patchable graphs for inputs that moved] in python/grove/dynamo_backend.py),
// else GROVE_SMALL_M_GEMM; a compile never changes the process's environment.
// Off and on are absolute; auto is a
// performance policy for cuda: the tuning table on a present device (measuring
// on the first compile of a shape: Note [One small-M choice per shape]), the
// shape heuristic where nothing can be measured (a cuda program lowered
// without loading kernels, or a failed measurement). On sim and cpu auto keeps
// the host GEMM: nothing there is worth tuning, and results stay those of the
// host GEMM (tests force the kernel with on, as the default variant). The
// choice, kernel and variant (Note [Small-M GEMM variants]), is made at
// lowering, so a lowered program runs one kernel per GEMM whichever backend
// runs it.
// Tests: SmallMGemmSelection.* (the switch changes the kernel and GEMM counts).
SmallMVariant small_m_gemm_variant(const GemmLaunch& launch, runtime::Device device,
                                   bool can_measure, std::optional<SmallMGemmMode> requested) {
  const SmallMVariant default_variant{small_m_rows_per_warp(launch.args.m), 1};
  // Note [Exact gelu in the tiny-K GEMM]: a taller GEMM with the exact gelu is
  // the tiny-K kernel's.
  if (launch.exact_gelu && launch.args.m > kMaxSmallM) return {};
  if (const SmallMVariant forced = forced_tiled_variant(launch, device, requested)) return forced;
  if (launch.exact_gelu) {
    // Note [Exact gelu in the small-M GEMM]: the lowering asked for this
    // kernel (only it applies the epilogue), having checked the mode; in auto
    // on a present device, the variant measured fastest for the GEMM alone
    // (or cuda's tiled kernel, which also applies it: Note [Small-M tiled GEMM]).
    GROVE_CHECK(small_m_gemm_qualifies(launch),
                "small-M GEMM: ", small_m_gemm_tuning_key("", launch.args),
                " carries the exact gelu but does not qualify for grove's kernel (a grove bug; "
                "please report it; GROVE_SMALL_M_EXACT_GELU=0 avoids it)");
    if (small_m_gemm_mode(requested) == SmallMGemmMode::kAuto && device.is_cuda() && can_measure &&
        runtime::device_available(device)) {
      GemmLaunch plain = launch;
      plain.exact_gelu = false;
      return tuned_gemm_kernel(plain, device, /*grove_only=*/true, GemmKernelForm::kSmallM);
    }
    return default_variant;
  }
  // Note [Small-M GEMMs measured past 32 rows].
  if (launch.args.m > kMaxSmallM) {
    return measured_past_32_rows() && small_m_gemm_mode(requested) == SmallMGemmMode::kAuto &&
                   device.is_cuda() && can_measure && runtime::device_available(device) &&
                   qualifies_up_to(launch, kMaxMeasuredSmallM)
               ? tuned_gemm_kernel(launch, device, /*grove_only=*/false, GemmKernelForm::kSmallM)
               : SmallMVariant{};
  }
  if (!small_m_gemm_qualifies(launch)) return {};
  switch (small_m_gemm_mode(requested)) {
    case SmallMGemmMode::kOff:
      return {};
    case SmallMGemmMode::kOn:
      return default_variant;
    case SmallMGemmMode::kAuto:
      break;
  }
  if (device.type != runtime::DeviceType::kCuda) return {};
  if (!can_measure || !runtime::device_available(device)) {
    return small_m_gemm_heuristic(launch.args) ? default_variant : SmallMVariant{};
  }
  return tuned_gemm_kernel(launch, device, /*grove_only=*/false, GemmKernelForm::kSmallM);
}

// Note [Small-N GEMMs as their transpose]: GROVE_SMALL_N_GEMM is auto (the
// default: measured against the library on a present cuda device, as 33 to 64
// rows are), on (wherever it qualifies, on any device: for tests) or off.
SmallMVariant small_n_gemm_variant(const GemmLaunch& launch, runtime::Device device,
                                   bool can_measure, std::optional<SmallMGemmMode> requested) {
  if (!small_n_gemm_qualifies(launch) || small_m_gemm_mode(requested) == SmallMGemmMode::kOff) {
    return {};
  }
  const char* value = std::getenv("GROVE_SMALL_N_GEMM");
  const std::string setting = value == nullptr ? "auto" : value;
  GROVE_CHECK_AS(ConfigError, setting == "auto" || setting == "on" || setting == "off",
                 "GROVE_SMALL_N_GEMM='", setting,
                 "': expected auto (the default: grove's transposed small-M kernel where it "
                 "measures faster than the library on cuda), on (wherever it qualifies) or off");
  if (setting == "off") return {};
  // Note [Small-M tiled GEMM]: a forced tile (cuda only).
  if (const std::optional<runtime::SmallMTile> tile = forced_small_m_tile();
      tile && device.is_cuda() && small_n_tiled_qualifies(launch)) {
    return {tile->rows, tile->columns, /*tiled=*/true, tile->warps};
  }
  if (setting == "on") return {small_m_rows_per_warp(launch.args.n), 1};
  if (!device.is_cuda() || !can_measure || !runtime::device_available(device) ||
      small_m_gemm_mode(requested) != SmallMGemmMode::kAuto) {
    return {};
  }
  return tuned_gemm_kernel(launch, device, /*grove_only=*/false, GemmKernelForm::kTransposed);
}

void clear_small_m_gemm_choices() { clear_gemm_kernel_choices(); }

}  // namespace grove::compiler::lowering
