#include "runtime/blas.h"

#include <cstdlib>
#include <cstring>

namespace grove::runtime {

const char* gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kBias:
      return "bias";
    case GemmEpilogue::kBiasGelu:
      return "bias_gelu";
    case GemmEpilogue::kBiasGeluAux:
      return "bias_gelu_aux";
    case GemmEpilogue::kBiasRelu:
      return "bias_relu";
    case GemmEpilogue::kBiasGradA:
      return "bias_grad_a";
    case GemmEpilogue::kBiasGradB:
      return "bias_grad_b";
    case GemmEpilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

bool gemm_search_enabled() {
  const char* value = std::getenv("GROVE_GEMM_SEARCH");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

const std::vector<SmallMTile>& small_m_tiled_gemm_tiles() {
  static const std::vector<SmallMTile> tiles = [] {
    std::vector<SmallMTile> all;
    for (int32_t warps : {4, 8}) {
      for (int32_t rows : {4, 8, 16}) {
        for (int32_t columns : {1, 2}) all.push_back({rows, columns, warps});
      }
    }
    return all;
  }();
  return tiles;
}

bool small_m_tile_known(const SmallMTile& tile) {
  for (const SmallMTile& known : small_m_tiled_gemm_tiles()) {
    if (known.rows == tile.rows && known.columns == tile.columns &&
        (tile.warps == 0 || tile.warps == known.warps)) {
      return true;
    }
  }
  return false;
}

bool small_m_tiled_gemm_qualifies(const GemmArgs& g) {
  const int64_t vector = 16 / static_cast<int64_t>(dtype_size(g.dtype));
  const bool epilogue = g.epilogue == GemmEpilogue::kNone || g.epilogue == GemmEpilogue::kBias ||
                        g.epilogue == GemmEpilogue::kBiasGelu ||
                        g.epilogue == GemmEpilogue::kBiasRelu;
  return (g.dtype == DType::kF32 || g.dtype == DType::kBF16 || g.dtype == DType::kF16) &&
         g.batch_count == 1 && g.alpha == 1.0f && g.beta == 0.0f && !g.transpose_a &&
         g.transpose_b && g.m >= 1 && g.m <= 64 && g.n >= 1 && g.n <= (int64_t{1} << 30) &&
         g.k >= 1 && g.k % vector == 0 && g.lda >= g.k && g.lda % vector == 0 && g.ldb >= g.k &&
         g.ldb % vector == 0 && g.ldc >= g.n && epilogue;
}

bool small_m_tiled_gemm_kn_qualifies(const GemmArgs& g) {
  constexpr int64_t kVector = 4;  // f32 elements in 16 bytes
  const bool epilogue = g.epilogue == GemmEpilogue::kNone || g.epilogue == GemmEpilogue::kBias ||
                        g.epilogue == GemmEpilogue::kBiasGelu ||
                        g.epilogue == GemmEpilogue::kBiasRelu;
  return g.dtype == DType::kF32 && g.batch_count == 1 && g.alpha == 1.0f && g.beta == 0.0f &&
         !g.transpose_a && !g.transpose_b && g.m >= 1 && g.m <= 64 && g.n >= kVector &&
         g.n % kVector == 0 && g.n <= (int64_t{1} << 30) && g.k >= 1 && g.k % kVector == 0 &&
         g.lda >= g.k && g.lda % kVector == 0 && g.ldb >= g.n && g.ldb % kVector == 0 &&
         g.ldc >= g.n && epilogue;
}

bool small_n_tiled_gemm_qualifies(const GemmArgs& g) {
  // The product the kernel computes: W' = A (its rows K-contiguous), A' = B [N, K].
  GemmArgs t = g;
  t.m = g.n;
  t.n = g.m;
  t.lda = g.ldb;
  t.ldb = g.lda;
  t.ldc = g.m;  // C's transpose is read only for its sizes here
  return g.m > 64 && !g.transpose_a && g.transpose_b && g.ldc >= g.n &&
         small_m_tiled_gemm_qualifies(t);
}

bool small_m_tiled_gemm_enabled() {
  const char* value = std::getenv("GROVE_SMALL_M_TILED");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace grove::runtime
