#include "runtime/blas.h"

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
    case GemmEpilogue::kBiasGradA:
      return "bias_grad_a";
    case GemmEpilogue::kBiasGradB:
      return "bias_grad_b";
    case GemmEpilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

}  // namespace grove::runtime
