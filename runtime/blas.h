// GEMMs as a device capability: the platform-neutral description of a GEMM
// (GemmArgs, GemmEpilogue) and BlasSupport, the interface each Platform returns
// from Platform::blas(). cuda implements it with cuBLAS / cuBLASLt
// (runtime/cuda/blas.h), sim and cpu with grove's deterministic host GEMM run
// as a host kernel (runtime/sim/host_blas.h). Callers never ask which device
// they are on to pick a GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/platform.h"

namespace grove::runtime {

// Work cuBLASLt applies to the product before storing it (Note [GEMM
// epilogues]): nothing, + bias, or gelu(+ bias) with gelu's tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); kBiasGeluAux
// is kBiasGelu that also stores the pre-activation (product + bias) into `aux`
// for the backward (Note [GEMM auxiliary output]). kBiasGradA / kBiasGradB
// also write a bias gradient (Note [GEMM bias gradients]). kDGelu multiplies
// the product by gelu'(aux), the gelu gradient (Note [GEMM auxiliary output]).
// kBiasRelu is max(0, product + bias) (Note [ReLU epilogues]).
enum class GemmEpilogue : uint8_t {
  kNone,
  kBias,
  kBiasGelu,
  kBiasGeluAux,
  kBiasRelu,
  kBiasGradA,
  kBiasGradB,
  kDGelu
};
// "none", "bias", "bias_gelu", "bias_gelu_aux", "bias_relu", "bias_grad_a", "bias_grad_b",
// "dgelu"
const char* gemm_epilogue_name(GemmEpilogue epilogue);

// One GEMM (or a strided batch of them): C = alpha * op(A) * op(B) + beta * C,
// op(A) is m x k, op(B) is k x n, C is m x n. The sizes and leading
// dimensions are read in one storage order: BlasSupport::gemm_row_major reads
// every matrix row-major (A stored untransposed is m x k with lda >= k); cuda's
// column-major gemm() (runtime/cuda/blas.h) reads them column-major (A
// untransposed has lda >= m) and gemm_row_major swaps the operands so that
// cuBLAS sees C^T. A, B and C share `dtype` (f32, f16 or bf16); accumulation
// is in f32.
struct GemmArgs {
  DType dtype = DType::kF32;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  // Batches: matrix i of A starts stride_a elements after matrix i-1 (etc.).
  int64_t batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Note [GEMM epilogues]: with an epilogue, C = epilogue(alpha op(A) op(B) +
  // beta C + bias) where `bias` (of `dtype`, contiguous) has one element per
  // row of the column-major C (m of cuda's gemm(); for gemm_row_major, one per
  // column of the row-major C, its n). Epilogues need batch_count = 1 and run through
  // cuBLASLt, whose GELU is the tanh approximation above.
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;
  // Note [GEMM auxiliary output]: with kBiasGeluAux, the matrix gelu was
  // applied to (alpha op(A) op(B) + beta C + bias) is also stored into `aux`,
  // laid out like C (same rows and columns, of `dtype`) with leading dimension
  // ld_aux. cuBLASLt needs ld_aux to be a multiple of 8 and at least C's rows
  // (column-major m); the lowering only asks for it when that holds. The
  // forward of a training step keeps this pre-activation for gelu's gradient
  // instead of running the gelu as a separate kernel after the GEMM. With
  // kDGelu, `aux` (same layout rules) is read: C = op(A) op(B) * gelu'(aux),
  // elementwise, with gelu' the derivative of the tanh approximation (needs
  // alpha 1, beta 0, batch_count 1): the backward's product of the next
  // layer's gradient and its weight, times gelu', in one GEMM (cuBLASLt DGELU).
  void* aux = nullptr;
  int64_t ld_aux = 0;
  // Note [GEMM bias gradients]: besides C, kBiasGradA writes
  // bias_grad[i] = sum_p op(A)[i, p] (one per row of op(A): m values) and
  // kBiasGradB writes bias_grad[j] = sum_p op(B)[p, j] (n values), reduced over
  // k: cuBLASLt's BGRADA / BGRADB. A weight-gradient GEMM dW = G^T X thereby
  // also yields the bias gradient (G summed over rows) without a reduction
  // kernel. The same math holds for gemm_row_major with row-major matrices
  // (it swaps A and B, so kBiasGradA becomes cuBLASLt's BGRADB). Needs
  // batch_count 1, alpha 1 and beta 0; bias_grad (of `dtype`) is contiguous.
  void* bias_grad = nullptr;
  // Note [GEMM algorithms by measurement]: on cuda, time cuBLASLt's candidate
  // algorithms for this GEMM's shape (once per process) even without
  // GROVE_GEMM_SEARCH: its program asked for it (compile option gemm_search).
  bool search = false;
  // Note [Small-M tiled GEMM] (runtime/cuda/small_m_tiled_gemm.h): with
  // tile_rows > 0, cuda runs the GEMM as grove's tiled small-M kernel with
  // tile_rows rows of A, 4 * tile_columns columns of C and tile_warps warps
  // (0: 4, or 8 where K is long) per block (small_m_tile_known) instead of cuBLAS; the lowering
  // sets it only where small_m_tiled_gemm_qualifies and a measurement found it faster. Sim and cpu
  // run their host GEMM whatever it says.
  int32_t tile_rows = 0;
  int32_t tile_columns = 0;
  int32_t tile_warps = 0;
  // With tile_rows and a kBias epilogue: the exact (erf) gelu after the bias
  // (Note [Exact gelu in the small-M GEMM] in compiler/lowering/small_m_gemm.cc).
  bool tile_exact_gelu = false;
  // With tile_rows: the kernel computes C's transpose, op(B)^T op(A)^T, for a
  // GEMM of many rows and at most 64 columns (small_n_tiled_gemm_qualifies;
  // Note [Small-N GEMMs as their transpose] in compiler/lowering/small_m_gemm.cc).
  bool tile_transposed = false;
};

// One tile of the tiled small-M kernel: rows of A and columns per column
// lane of a block, and its warps (0: chosen from K).
struct SmallMTile {
  int32_t rows = 0;
  int32_t columns = 0;
  int32_t warps = 0;
  bool operator==(const SmallMTile&) const = default;
};

// The tiles the tuning times, in order: rows of A per block 4, 8 or 16,
// columns per column lane 1 or 2, 4 or 8 warps.
const std::vector<SmallMTile>& small_m_tiled_gemm_tiles();

// Whether cuda's kernel comes in `tile`: one of small_m_tiled_gemm_tiles, or
// one of their rows and columns with warps 0.
bool small_m_tile_known(const SmallMTile& tile);

// Whether the tiled small-M kernel computes `args` (Note [Small-M tiled
// GEMM]): one plain GEMM (no batch, alpha 1, beta 0) of 1 to 64 rows in f32,
// bf16 or f16, A row-major and W [N, K] (transpose_b), K, lda and ldb multiples
// of 16 bytes' elements, an epilogue of none, bias, bias_gelu or bias_relu.
// Pointers are not looked at (the lowering asks before it has any; a launch
// checks their 16-byte alignment).
bool small_m_tiled_gemm_qualifies(const GemmArgs& args);

// Whether the tiled small-M kernel's [K, N] form computes `args` (Note
// [Small-M tiled GEMM over a K x N weight] in runtime/cuda/small_m_tiled_gemm.h):
// as small_m_tiled_gemm_qualifies asks, but W row-major [K, N] (not
// transpose_b: GPT-2's Conv1D, x @ W), f32 only, N and ldb multiples of 4.
bool small_m_tiled_gemm_kn_qualifies(const GemmArgs& args);

// Whether the tiled kernel computes `args` as its transpose (GemmArgs::
// tile_transposed): more than 64 rows, 1 to 64 columns, A row-major
// (K-contiguous), B [N, K] (transpose_b), the rest as small_m_tiled_gemm_qualifies
// asks of the transpose.
bool small_n_tiled_gemm_qualifies(const GemmArgs& args);

// Whether GROVE_SMALL_M_TILED (unset or "1": on; "0": off) lets the tuning
// time the tiled kernel (Note [Small-M tiled GEMM]).
bool small_m_tiled_gemm_enabled();

// Whether GROVE_GEMM_SEARCH asks cuda's BLAS to time cuBLASLt's candidate
// algorithms per GEMM shape and keep the fastest (Note [GEMM algorithms by
// measurement], runtime/cuda/gemm_algorithm_search.h): "1"; "0" or unset, the
// heuristic's first. Read at each call, so that one process can time both;
// the small-M GEMM tuning keys its choices by it (the library side differs).
bool gemm_search_enabled();

// The GEMMs of one device (one per Platform, which owns it).
class BlasSupport {
 public:
  virtual ~BlasSupport() = default;

  // Enqueues the GEMM, every matrix row-major (leading dimension = row
  // stride), on `stream` of the platform's device, in stream order (captured
  // into a graph when the stream is capturing). Throws ShapeError or
  // DTypeError for bad arguments, DeviceError when the device's BLAS is
  // missing or fails, CaptureViolation when the stream's capture forbids it.
  // On sim and cpu the arguments are checked when the host kernel runs.
  virtual void gemm_row_major(StreamHandle stream, const GemmArgs& args) = 0;

  // Whether this device runs `epilogue` on a row-major GEMM of `dtype` whose
  // C is m x n with k reduced (the sizes matter for some epilogues on cuda;
  // pass 64 where a representative shape will do). Never throws: false when
  // the BLAS library is missing. Always true on sim and cpu.
  virtual bool gemm_row_major_epilogue_available(GemmEpilogue epilogue, DType dtype, int64_t m,
                                                 int64_t n, int64_t k) = 0;

  // Sets up what GEMMs on `stream` need (cuda: its cuBLAS handle and
  // workspace) now, e.g. before a capture, so that the first captured GEMM
  // does no set-up work. Nothing to do on sim and cpu.
  virtual void prepare_gemm(StreamHandle stream) = 0;

  // Starts loading every tile's kernel of cuda's tiled small-M GEMM for
  // `dtype`, so that the GEMM tuning, which times each tile, does not JIT them
  // one after another (Note [Kernels loaded in the background],
  // runtime/cuda/kernel_loader.cc). Nothing to do on sim and cpu.
  virtual void preload_small_m_tiled_kernels(DType /*dtype*/) {}
};

}  // namespace grove::runtime
