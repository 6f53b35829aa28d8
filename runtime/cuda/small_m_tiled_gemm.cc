#include "runtime/cuda/small_m_tiled_gemm.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/error.h"

namespace grove::runtime::cuda_detail {
namespace {

// One PTX per storage type (f32, bf16, f16), so that a process JIT-compiles
// only the kernels of the types it runs.
constexpr const char* kPtx[] = {
#include "runtime/cuda/small_m_tiled_gemm_f32_kernel_ptx.inc"
    ,
#include "runtime/cuda/small_m_tiled_gemm_bf16_kernel_ptx.inc"
    ,
#include "runtime/cuda/small_m_tiled_gemm_f16_kernel_ptx.inc"
};
// Note [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc).
constexpr const char* kProgrammaticPtx[] = {
#include "runtime/cuda/small_m_tiled_gemm_f32_kernel_programmatic_ptx.inc"
    ,
#include "runtime/cuda/small_m_tiled_gemm_bf16_kernel_programmatic_ptx.inc"
    ,
#include "runtime/cuda/small_m_tiled_gemm_f16_kernel_programmatic_ptx.inc"
};

// Note [Small-M tiled GEMM over a K x N weight]: its kernels, f32 only.
constexpr const char* kKnPtx =
#include "runtime/cuda/small_m_tiled_gemm_kn_f32_kernel_ptx.inc"
    ;
constexpr const char* kKnProgrammaticPtx =
#include "runtime/cuda/small_m_tiled_gemm_kn_f32_kernel_programmatic_ptx.inc"
    ;

// The index of a storage type's PTX above.
int type_index(DType dtype) { return dtype == DType::kF32 ? 0 : dtype == DType::kBF16 ? 1 : 2; }
constexpr int64_t kColumnLanes = 4;  // column lanes per warp (the kernel's kColumnLanes)
constexpr int64_t kKLanes = 8;       // lanes along K per warp (the kernel's kKLanes)

// Warps per block unless the tile names them: 8 where K has 32 or more steps of 8 vectors of 16
// bytes (K >= 1024 in f32), else 4. A function of the shape, so every launch of a GEMM sums in one
// order.
int warps_for(const GemmArgs& g) {
  const int64_t step = kKLanes * (16 / static_cast<int64_t>(dtype_size(g.dtype)));
  return (g.k + step - 1) / step >= 32 ? 8 : 4;
}

// The [K, N] kernel's: 8 where K has 32 or more of its warp's steps of 16 (K >= 512).
constexpr int64_t kKnColumnsPerVector = 32;  // columns of a block per tile column (8 lanes x 4)
constexpr int64_t kKnStep = 16;              // k of one warp step (4 lanes x 4)
int kn_warps_for(const GemmArgs& g) { return (g.k + kKnStep - 1) / kKnStep >= 32 ? 8 : 4; }

// The kernel's code for + bias, then the exact gelu.
constexpr int64_t kExactGeluCode = 4;

bool aligned(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15) == 0; }

// The kernel's epilogue code (small_m_tiled_gemm_device.cuh).
int64_t epilogue_code(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone:
      return 0;
    case GemmEpilogue::kBias:
      return 1;
    case GemmEpilogue::kBiasGelu:
      return 2;
    case GemmEpilogue::kBiasRelu:
      return 3;
    default:
      return -1;
  }
}

}  // namespace

KernelHandle SmallMTiledGemm::kernel_for(DType dtype, int32_t rows, int32_t columns, int warps,
                                         bool kn, bool whole_module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_tuple(dtype, rows, columns, warps, kn);
  auto found = kernels_.find(key);
  if (found == kernels_.end()) {
    KernelSource source;
    source.name = str_cat("grove_small_m_tiled_gemm_", kn ? "kn_" : "", dtype_name(dtype), "_r",
                          rows, "_c", columns, "_w", warps);
    source.ptx = kn ? kKnPtx : kPtx[type_index(dtype)];
    source.ptx_programmatic = kn ? kKnProgrammaticPtx : kProgrammaticPtx[type_index(dtype)];
    source.whole_module = whole_module;
    found = kernels_.emplace(key, platform_.load_kernel(source)).first;
  }
  return found->second;
}

// Note [Tiles loaded for the tuning]: the GEMM tuning times every tile, so
// it JITs every entry of the module. The driver JITs modules side by side
// (session 23 r2, H200, `eager_latency --jit-probe`: the f32 module's 12
// entries on 8 loader threads in 440 ms, on one thread in 1857 ms, the
// module whole in 1438 ms), so the tuning starts each entry loading on its
// own before it times anything. Cold compiles in that round (empty driver
// cache and tuning table, one process each): mlp16x512 b=1 623 ms with
// entries, 1455-1592 ms with the module whole, 1548-1876 ms on the old path;
// gpt4x256 b=1 T=32 1566, 2535-2777 and 3956-4968 ms. GROVE_TILE_PRELOAD
// picks: "entries" (the default), "module" (the module whole, once) or
// "none" (each tile at its first launch). The kernels are the same either
// way (Note [One entry of a PTX module]).
void SmallMTiledGemm::preload(DType dtype) {
  const char* value = std::getenv("GROVE_TILE_PRELOAD");
  const std::string_view mode = value == nullptr || *value == '\0' ? "entries" : value;
  GROVE_CHECK_AS(ConfigError, mode == "module" || mode == "entries" || mode == "none",
                 "GROVE_TILE_PRELOAD='", mode, "': expected entries (the default), module or none");
  if (mode == "none") return;
  for (const SmallMTile& tile : small_m_tiled_gemm_tiles()) {
    if (tile.warps > 0)
      kernel_for(dtype, tile.rows, tile.columns, tile.warps, false, mode == "module");
  }
}

void SmallMTiledGemm::launch(StreamHandle stream, const GemmArgs& gemm) {
  const SmallMTile tile{gemm.tile_rows, gemm.tile_columns, gemm.tile_warps};
  // Note [Small-M tiled GEMM over a K x N weight]: W row-major [K, N].
  const bool kn = !gemm.tile_transposed && !gemm.transpose_b;
  GROVE_CHECK((gemm.tile_transposed ? small_n_tiled_gemm_qualifies(gemm)
               : kn                 ? small_m_tiled_gemm_kn_qualifies(gemm)
                                    : small_m_tiled_gemm_qualifies(gemm)) &&
                  small_m_tile_known(tile),
              "small-M tiled GEMM: a GEMM of m=", gemm.m, ", n=", gemm.n, ", k=", gemm.k, " (",
              dtype_name(gemm.dtype), ", ", gemm_epilogue_name(gemm.epilogue), ", tile ",
              gemm.tile_rows, " x ", gemm.tile_columns, " x ", gemm.tile_warps,
              gemm.tile_transposed ? ", transposed" : "",
              ") it cannot compute (a grove bug; please report it)");
  // The product the kernel computes: C's own, or (transposed) C^T = B A^T
  // with A and B swapped (Note [Small-N GEMMs as their transpose]).
  GemmArgs g = gemm;
  if (gemm.tile_transposed) {
    std::swap(g.m, g.n);
    std::swap(g.a, g.b);
    std::swap(g.lda, g.ldb);
  }
  GROVE_CHECK(!g.tile_exact_gelu || g.epilogue == GemmEpilogue::kBias,
              "small-M tiled GEMM: the exact gelu comes after a bias epilogue only, found ",
              gemm_epilogue_name(g.epilogue), " (a grove bug; please report it)");
  GROVE_CHECK(aligned(g.a) && aligned(g.b) && g.c != nullptr &&
                  (g.epilogue == GemmEpilogue::kNone || g.bias != nullptr),
              "small-M tiled GEMM: A and W must be 16-byte aligned and C (and the bias of a bias "
              "epilogue) given; found A ",
              aligned(g.a) ? "aligned" : "unaligned", ", W ",
              aligned(g.b) ? "aligned" : "unaligned", ", C ", g.c == nullptr ? "null" : "set",
              ", bias ", g.bias == nullptr ? "null" : "set",
              " (a grove bug; please report it; GROVE_SMALL_M_TILED=0 avoids this kernel)");
  const int warps = tile.warps > 0 ? tile.warps : kn ? kn_warps_for(g) : warps_for(g);
  const KernelHandle kernel = kernel_for(g.dtype, tile.rows, tile.columns, warps, kn, false);
  const int64_t block_columns = (kn ? kKnColumnsPerVector : kColumnLanes) * tile.columns;
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>((g.n + block_columns - 1) / block_columns);
  dims.grid.y = static_cast<uint32_t>((g.m + tile.rows - 1) / tile.rows);
  dims.block.x = static_cast<uint32_t>(32 * warps);
  KernelArgs args;
  args.add_pointer(g.a)
      .add_i64(g.lda)
      .add_pointer(g.b)
      .add_i64(g.ldb)
      .add_pointer(g.epilogue == GemmEpilogue::kNone ? nullptr : g.bias)
      .add_pointer(g.c)
      .add_i64(g.ldc)
      .add_i64(g.m)
      .add_i64(g.n)
      .add_i64(g.k)
      .add_i64(g.tile_exact_gelu ? kExactGeluCode : epilogue_code(g.epilogue));
  if (!kn) args.add_i64(g.tile_transposed ? 1 : 0);
  platform_.launch_kernel(kernel, dims, args, stream);
}

}  // namespace grove::runtime::cuda_detail
