#include "runtime/cuda/small_m_gemv.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda/streamed_gemv_flags.h"
#include "runtime/error.h"

namespace grove::runtime::cuda_detail {
namespace {

constexpr const char* kPtx =
#include "runtime/cuda/small_m_gemv_kernel_ptx.inc"
    ;
// Note [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc).
constexpr const char* kProgrammaticPtx =
#include "runtime/cuda/small_m_gemv_kernel_programmatic_ptx.inc"
    ;
constexpr uint32_t kWarpsPerBlock = 4;  // the kernel's __launch_bounds__(128)
// Note [Streamed GEMV]: the streamed kernel's block (kStreamThreads) and grid.
constexpr uint32_t kStreamThreads = 128;
constexpr int kStreamBlocksPerSm = 2;
// The _as kernels' A in shared memory (kSharedAElements in small_m_gemv_kernel.cu).
constexpr int64_t kMaxSharedAK = 8192;

bool aligned(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15) == 0; }

// 0, 1, 2, 3 for M = 1, 2, 4, 8; -1 for other M.
int row_variant(int64_t m) {
  switch (m) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 4:
      return 2;
    case 8:
      return 3;
    default:
      return -1;
  }
}

}  // namespace

bool small_m_gemv_qualifies(const GemmArgs& g) {
  return (g.dtype == DType::kBF16 || g.dtype == DType::kF16) && row_variant(g.m) >= 0 && g.n >= 1 &&
         g.k >= 8 && g.k % 8 == 0 && !g.transpose_a && g.transpose_b && g.batch_count == 1 &&
         g.alpha == 1.0f && (g.beta == 0.0f || g.beta == 1.0f) &&
         g.epilogue == GemmEpilogue::kNone && g.lda >= g.k && g.lda % 8 == 0 && g.ldb >= g.k &&
         g.ldb % 8 == 0 && g.ldc >= g.n && aligned(g.a) && aligned(g.b) && g.c != nullptr &&
         g.n <= 0x7fffffff;
}

void SmallMGemv::launch(StreamHandle stream, const GemmArgs& g) {
  GROVE_CHECK(small_m_gemv_qualifies(g), "small-M GEMV: a GEMM of m=", g.m, ", n=", g.n,
              ", k=", g.k, " it cannot compute (a grove bug; please report it)");
  const int type = g.dtype == DType::kBF16 ? 0 : 1;
  if (g.m == 1 && streamed_gemv_enabled(StreamedGemvs::kBlas)) {
    launch_streamed(stream, g, type);
    return;
  }
  const int rows = row_variant(g.m);
  KernelHandle kernel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_[type][rows]) {
      KernelSource source;
      source.name = str_cat("grove_small_m_gemv_", type == 0 ? "bf16" : "f16", "_m", g.m);
      source.ptx = kPtx;
      source.ptx_programmatic = kProgrammaticPtx;
      kernels_[type][rows] = platform_.load_kernel(source);
      loaded_[type][rows] = true;
    }
    kernel = kernels_[type][rows];
  }
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>((g.n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dims.block.x = kWarpsPerBlock * 32;
  KernelArgs args;
  args.add_pointer(g.a)
      .add_i64(g.lda)
      .add_pointer(g.b)
      .add_i64(g.ldb)
      .add_pointer(g.c)
      .add_i64(g.ldc)
      .add_i64(g.n)
      .add_i64(g.k)
      .add_i64(g.beta == 1.0f ? 1 : 0);
  platform_.launch_kernel(kernel, dims, args, stream);
}

void SmallMGemv::launch_streamed(StreamHandle stream, const GemmArgs& g, int type) {
  // Note [Streamed GEMV holds A in shared memory]: the _as entry points take the place of the
  // others where GROVE_GEMV_A_SHARED asks for them, up to K = kMaxSharedAK.
  namespace bits = streamed_gemv_flags;
  const bool evict_first = weights_evict_first();
  const bool a_shared = g.k <= kMaxSharedAK && streamed_gemv_a_shared(g.n);
  // Note [Streamed GEMV slots]: 32 slots where GROVE_STREAMED_GEMV_SLOTS asks for deep ones.
  const int deep = !a_shared && streamed_gemv_deep_slots(g.n) ? 1 : 0;
  // 24 slots (16 beside A) are the kernel's static shared memory; 32 are dynamic.
  const uint32_t shared_bytes = deep != 0 ? 32 * kStreamThreads * 16 : 0;
  KernelHandle kernel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int form = a_shared ? 2 : deep;
    if (!streamed_loaded_[type][form]) {
      KernelSource source;
      source.name = str_cat("grove_small_m_gemv_streamed_", type == 0 ? "bf16" : "f16",
                            deep != 0 ? "_s32" : "", a_shared ? "_as" : "");
      source.ptx = kPtx;
      source.ptx_programmatic = kProgrammaticPtx;
      source.max_dynamic_shared_bytes = shared_bytes;
      streamed_[type][form] = platform_.load_kernel(source);
      streamed_loaded_[type][form] = true;
    }
    kernel = streamed_[type][form];
  }
  const int multiprocessors = platform_.multiprocessor_count();
  // No more blocks than columns need (a warp per column at least).
  const int64_t needed = (g.n + kStreamThreads / 32 - 1) / (kStreamThreads / 32);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(std::min<int64_t>(
      needed,
      static_cast<int64_t>(multiprocessors) * streamed_gemv_blocks_per_sm(kStreamBlocksPerSm)));
  dims.block.x = kStreamThreads;
  dims.shared_bytes = shared_bytes;
  int64_t flags = 0;
  // Note [Streamed GEMV slots]: the deep rings read under the default policy.
  if (evict_first && deep == 0) flags |= bits::kEvictFirst;
  if (bits::allow_next_first(/*blas=*/true)) flags |= bits::kAllowNextFirst;
  if (bits::residual_first()) flags |= bits::kResidualFirst;
  flags |= bits::prefetch_column_bits();
  KernelArgs args;
  args.add_pointer(g.a)
      .add_pointer(g.b)
      .add_i64(g.ldb)
      .add_pointer(g.c)
      .add_i64(g.n)
      .add_i64(g.k)
      .add_i64(g.beta == 1.0f ? 1 : 0)
      .add_i64(flags);
  platform_.launch_kernel(kernel, dims, args, stream);
}

}  // namespace grove::runtime::cuda_detail
