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

}  // namespace grove::runtime
