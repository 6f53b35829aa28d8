// Small-M GEMMs of grove's own: a GEMM with few rows (batch-1 / decode
// inference: x [M, K] times a weight [N, K]^T, M <= kMaxSmallM) runs as one
// generated reduction kernel instead of a library GEMM call, with the bias and
// gelu epilogue in the kernel. On cuda the library call costs ~5 us of GPU
// time for a 1x512x512 product whose weights sit in L2; the kernel is a warp
// per output column and group of up to 8 rows of A, reading the weight row
// coalesced, one accumulator per row per lane and a shuffle reduction (Note
// [Small-M GEMM kernel]).
//
// Which one runs (a compile's small_m_gemm option, else GROVE_SMALL_M_GEMM;
// Note [Small-M GEMM selection]):
//   off   the library GEMM always;
//   on    grove's kernel for every GEMM that qualifies;
//   auto  (default) on cuda the tuning table (gemm_tuning_table.h): measured
//         once per GPU and shape on first compile, then read from disk; a
//         shape heuristic where no measurement can be made. On sim and cpu
//         auto keeps the host GEMM (on still runs the kernel there). The
//         measurement also times cuda's tiled small-M kernel (Note [Small-M
//         tiled GEMM], runtime/cuda/small_m_tiled_gemm.h), run as a library
//         step naming its tile where it is the fastest.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_compiler.h"
#include "compiler/lowering/kernel_assembly.h"
#include "compiler/lowering/small_m_gemm_mode.h"
#include "compiler/lowering/steps.h"
#include "runtime/blas.h"
#include "runtime/device.h"

namespace grove::compiler::lowering {

constexpr int64_t kMaxSmallM = 32;
// Note [Small-M GEMMs measured past 32 rows]: auto on a present cuda device
// also times grove's kernel against the library for 33 to 64 rows and keeps
// the faster (nn.TransformerDecoder's cross-attention key/value projection of
// 48 memory rows at batch 1 ran as two split-K library kernels). Mode on and
// the exact gelu epilogue stay within kMaxSmallM; GROVE_SMALL_M_PAST_32=0
// keeps 33 to 64 rows on the library (for A/Bs). Test (cuda):
// GemmTuningTableTest.AutoOnCudaMeasuresAFortyEightRowGemm.
constexpr int64_t kMaxMeasuredSmallM = 64;
// Rows of A one warp reduces together (Note [Small-M GEMM kernel]).
constexpr int64_t kSmallMRowsPerWarp = 8;
// Columns of C one warp computes together in a column-tiled variant (Note
// [Small-M GEMM column tiles]).
constexpr int64_t kSmallMColumnTile = 4;

// One form of grove's kernel for a shape: the rows of A each warp reduces
// (0: not grove's kernel) and the columns of C it computes (1 or kSmallMColumnTile).
// tiled: cuda's tiled small-M kernel instead (Note [Small-M tiled GEMM] in
// runtime/cuda/small_m_tiled_gemm.h), rows and columns its tile
// (runtime::small_m_tiled_gemm_tiles), run as a library GEMM step.
struct SmallMVariant {
  int64_t rows = 0;
  int64_t columns = 1;
  bool tiled = false;
  int64_t warps = 0;  // tiled: the tile's warps (0: chosen from K)
  explicit operator bool() const { return rows > 0; }
  bool operator==(const SmallMVariant&) const = default;
};

// Note [Small-M tiled GEMM]: GROVE_SMALL_M_TILED: unset or "1", auto's
// tuning also times cuda's tiled kernel where it qualifies; "0", never;
// "RxC" or "RxCxW" (a tile of small_m_tiled_gemm_tiles, e.g. "8x2", warps from
// K, or "8x2x8"), that tile for every
// small-M GEMM on cuda that qualifies for it, without measuring (for tests;
// sim and cpu keep their kernels). Anything else throws ConfigError.
std::optional<runtime::SmallMTile> forced_small_m_tile();

// Note [Small-M tiled GEMM]: whether small-N GEMMs may run the tiled kernel
// as their transpose: GROVE_SMALL_M_TILED_TRANSPOSED=1 (off by default: session
// 21 timed it on an H100, 2.23 us against the transposed generated kernel's
// 2.11 for MLP-Mixer's 512x256x16, but no GPU test of its results has run yet).
bool small_n_tiled_enabled();

// Whether the tiled kernel can run `launch` as its transpose (Note [Small-N
// GEMMs as their transpose]): small_n_tiled_enabled, small_n_gemm_qualifies
// and runtime::small_n_tiled_gemm_qualifies.
bool small_n_tiled_qualifies(const GemmLaunch& launch);

// Note [Small-M tiled GEMM over a K x N weight] (runtime/cuda/small_m_tiled_gemm.h):
// whether the tuning times the tiled kernel's [K, N] form (on by default;
// GROVE_SMALL_M_TILED_KN=0 leaves it out, and the tuning keys of GEMMs it
// qualifies for then differ, so one process can A/B it). On since session 25:
// its GPU cases passed on an H200 (session 23) and an H100 (session 25), and
// GPT-2 b1 ran faster with it in both leases (session 23, H200, one process:
// 110.9 -> 102.3 us a call, GPU time 78.1 -> 59.0 us).
bool small_m_tiled_kn_enabled();

// Whether the tiled kernel can run `launch` (one plain call, M <= 64,
// runtime::small_m_tiled_gemm_qualifies, or small_m_tiled_kn_enabled and
// runtime::small_m_tiled_gemm_kn_qualifies, a bias slot for a bias epilogue; an
// exact gelu only after a bias epilogue).
bool small_m_tiled_qualifies(const GemmLaunch& launch);

// Whether grove's kernel can compute `launch`: one GEMM (no batch), alpha 1,
// beta 0, 1 <= M <= kMaxSmallM, K >= 1, f32 / bf16 / f16, and an epilogue of
// none, bias, bias_gelu, bias_gelu_aux or dgelu (the product times gelu' of
// the aux matrix: the backward of linear + gelu).
bool small_m_gemm_qualifies(const GemmLaunch& launch);

// The heuristic auto falls back to: M <= 8, the weight read along K
// (linear's [N, K] layout: coalesced) and at most 8 MiB of weights (reads
// that stay in L2 and a launch-bound library call).
bool small_m_gemm_heuristic(const runtime::GemmArgs& args);

// The kernel's version in tuning keys: a measurement of an older kernel is
// not used for this one. Raise it whenever small_m_gemm_kernel changes.
// (5: large weights are timed from HBM, Note [Small-M GEMM timing from HBM];
// 6: the library side of decode shapes is cuda's small-M GEMV, Note [Small-M
// GEMV] in runtime/cuda/small_m_gemv.h, so older measurements are stale;
// 7: column-tiled variants, Note [Small-M GEMM column tiles].)
constexpr int kSmallMKernelVersion = 7;

// The tuning table's key:
// "<gpu>|<dtype>|m=..,n=..,k=..|ta=..,tb=..|<epilogue>|v<kernel version>".
std::string small_m_gemm_tuning_key(const std::string& gpu, const runtime::GemmArgs& args);

// The rows of A each warp of the kernel reduces by default: the largest
// divisor of m that is at most kSmallMRowsPerWarp (Note [Small-M GEMM kernel]).
int64_t small_m_rows_per_warp(int64_t m);

// The kernel variants auto measures for m rows (Note [Small-M GEMM
// variants]): the largest divisors of m up to 8, 4 and 2, each once,
// the default first.
std::vector<int64_t> small_m_row_variants(int64_t m);

// Every variant auto measures for an m x n product: each of
// small_m_row_variants(m) with one column, then (Note [Small-M GEMM column
// tiles]; not with GROVE_SMALL_M_COLUMN_TILES=0) each with kSmallMColumnTile
// columns where that divides n.
std::vector<SmallMVariant> small_m_variants(int64_t m, int64_t n);

// The kernel that computes a qualifying `launch` over its slots, each warp
// reducing `rows_per_warp` rows of A (0: small_m_rows_per_warp; otherwise a
// divisor of M of at most kSmallMRowsPerWarp). `transposed`: a launch that
// small_n_gemm_qualifies, computed as its transpose (Note [Small-N GEMMs as
// their transpose]: the rows per warp then divide N, C's columns).
// `columns`: the columns of C each warp computes (Note [Small-M GEMM column
// tiles]: 1, or a divisor of the kernel's N).
AssembledKernel small_m_gemm_kernel(const GemmLaunch& launch, int64_t rows_per_warp = 0,
                                    bool transposed = false, int64_t columns = 1);

// Whether `launch` can run as the small-M kernel of its transpose (Note
// [Small-N GEMMs as their transpose]): one GEMM, alpha 1, beta 0, more than
// kMaxMeasuredSmallM rows, 1 to kMaxMeasuredSmallM columns, A K-contiguous
// (not transpose_a), an epilogue of none, bias, bias_gelu or bias_relu.
bool small_n_gemm_qualifies(const GemmLaunch& launch);

// Whether `launch` runs as the transposed kernel, and as which variant (rows
// per warp a divisor of N) to pass small_m_gemm_kernel with transposed; a
// false variant for not. Auto measures on a present cuda device (when
// `can_measure`); GROVE_SMALL_N_GEMM=on takes it wherever it qualifies, off never.
SmallMVariant small_n_gemm_variant(const GemmLaunch& launch, runtime::Device device,
                                   bool can_measure,
                                   std::optional<SmallMGemmMode> requested = std::nullopt);

// Whether `launch` runs as grove's kernel on `device`, and as which variant
// (Note [Small-M GEMM selection]): false for the library GEMM, else the rows
// per warp and columns to pass small_m_gemm_kernel. With auto on cuda this may compile the
// kernel's variants and time them and the library GEMM on the device (when
// `can_measure` and the device is present).
// `requested`: the compile's own mode, before the environment (small_m_gemm_mode).
SmallMVariant small_m_gemm_variant(const GemmLaunch& launch, runtime::Device device,
                                   bool can_measure,
                                   std::optional<SmallMGemmMode> requested = std::nullopt);

// Whether an epilogue adds a bias (bias, bias_gelu, bias_gelu_aux, bias_relu).
bool gemm_epilogue_has_bias(runtime::GemmEpilogue epilogue);

// Whether an epilogue reads nothing but C and a bias (none, bias, bias_gelu,
// bias_relu): those the transposed small-M and the tiny-K kernels apply.
bool gemm_epilogue_is_pointwise_on_c(runtime::GemmEpilogue epilogue);

// Whether a launch is one call of one product (no batch), alpha 1, beta 0, in
// f32, bf16 or f16, its operands at offset 0: what every grove GEMM kernel
// (small-M, transposed small-M, tiny-K) asks of a launch before its shape.
bool gemm_launch_is_one_plain_call(const GemmLaunch& launch);

// Note [Small-M GEMM column tiles]: whether auto also measures column-tiled
// variants (GROVE_SMALL_M_COLUMN_TILES, on by default).
bool small_m_column_tiles_enabled();

// Forgets the process-wide choices (Note [One small-M choice per shape]); for tests.
void clear_small_m_gemm_choices();

}  // namespace grove::compiler::lowering
