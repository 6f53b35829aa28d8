#include "compiler/lowering/tiny_k_gemm.h"

#include <cstdlib>
#include <string>

#include "compiler/codegen/kernel_builder.h"
#include "compiler/lowering/gemm_kernel_tuning.h"
#include "compiler/lowering/small_m_gemm.h"
#include "compiler/ops/op_registry.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using codegen::ExprOp;
using codegen::ReduceOp;
using runtime::DType;
using runtime::GemmArgs;
using runtime::GemmEpilogue;

}  // namespace

bool tiny_k_gemm_qualifies(const GemmLaunch& launch) {
  const GemmArgs& g = launch.args;
  return gemm_launch_is_one_plain_call(launch) && g.m > kMaxMeasuredSmallM && g.n >= 1 &&
         g.k >= 1 && g.k <= kMaxTinyK && gemm_epilogue_is_pointwise_on_c(g.epilogue) &&
         (!launch.exact_gelu || (g.epilogue == GemmEpilogue::kBias && g.dtype == DType::kF32)) &&
         (g.epilogue == GemmEpilogue::kNone || launch.bias_slot >= 0);
}

// Note [Tiny-K GEMM kernel]: C[m, n] = epilogue(sum_k A[m, k] B[n, k]) as a
// thread-per-row reduction (Note [Thread-per-row reductions]) over the
// iteration space [N, M, K]: a thread per output, threads of a warp on
// consecutive rows m of one column n, so the warp's loads of A read along
// A's rows' starts (coalesced where A is read transposed, as a token-mixing
// linear reads its [tokens, channels] activation) and its loads of B are one
// address (a broadcast); each thread folds its K products in increasing k,
// as the host does, so cuda's sums equal sim's bitwise. C is written a column
// at a time (each store strided by ldc: scattered, but only M x N of them).
// Tests: TinyKGemm.* (tests/compiler/lowering/tiny_k_gemm_test.cc).
//
// Note [Exact gelu in the tiny-K GEMM]: as in the small-M kernel (Note [Exact
// gelu in the small-M GEMM]), PyTorch's exact (erf) gelu after a linear whose
// bias is a separate add (ATen's mm, view, add: a linear over a transposed 3-d
// activation, MLP-Mixer's token-mixing fc1) is this kernel's epilogue: the
// lowering absorbs the gelu's nodes where the GEMM has 65 to
// kMaxTinyKExactGeluRows rows, an inner dimension of at most 32, f32 and A at
// offset 0, on cuda in auto (or with GROVE_SMALL_M_GEMM=on), and the kernel
// then runs whatever a measurement would say (the library cannot apply it).
// The row limit is what was measured: at 512 rows (MLP-Mixer b1, H100, session
// 20) the kernel with the gelu took 4.8 us against the library's 5.3 and the
// gelu's 1.9; taller GEMMs (batch 16: 8192 rows, each warp's stores strided
// across 32 rows of C) were not measured, so there the tiny-K kernel is only
// chosen by measurement and the gelu keeps its kernel. GROVE_TINY_K_EXACT_GELU=0
// (or GROVE_TINY_K_GEMM=off) keeps the gelu's kernel everywhere. Tests:
// TinyKGemm.ExactGeluAfterABiasAddIsTheKernelsEpilogue.
AssembledKernel tiny_k_gemm_kernel(const GemmLaunch& launch) {
  const GemmArgs& g = launch.args;
  GROVE_CHECK(tiny_k_gemm_qualifies(launch), "tiny-K GEMM: ", small_m_gemm_tuning_key("", g),
              " does not qualify for grove's kernel (a grove bug; please report it)");
  std::string name = "tiny_k_gemm";
  if (g.epilogue != GemmEpilogue::kNone)
    name += std::string("_") + runtime::gemm_epilogue_name(g.epilogue);
  if (launch.exact_gelu) name += "_exact_gelu";
  codegen::KernelBuilder b(name, {g.n, g.m, g.k});
  AssembledKernel out;
  // Strides over (n, m, k).
  const int a =
      b.input(g.dtype, g.transpose_a ? runtime::Shape{0, 1, g.lda} : runtime::Shape{0, g.lda, 1});
  out.input_slots.push_back(launch.a_slot);
  const int w =
      b.input(g.dtype, g.transpose_b ? runtime::Shape{g.ldb, 0, 1} : runtime::Shape{1, 0, g.ldb});
  out.input_slots.push_back(launch.b_slot);
  const int sum = b.reduce(ReduceOp::kSum, b.binary(ExprOp::kMul, b.load(a), b.load(w)));
  int value = b.reduced(sum);
  if (g.epilogue != GemmEpilogue::kNone) {
    const int bias = b.input(g.dtype, {1, 0, 0});
    out.input_slots.push_back(launch.bias_slot);
    value = b.binary(ExprOp::kAdd, value, b.load(bias));
  }
  if (g.epilogue == GemmEpilogue::kBiasGelu) value = b.unary(ExprOp::kGelu, value);
  if (g.epilogue == GemmEpilogue::kBiasRelu) value = b.unary(ExprOp::kRelu, value);
  if (launch.exact_gelu) {
    // Note [Exact gelu in the tiny-K GEMM]: the importer's expression, in its
    // order, on f32 constants as its scalars are (as the small-M kernel's).
    const int scaled = b.binary(ExprOp::kMul, value, b.constant(0.7071067811865476, DType::kF32));
    const int erf = ops::OpRegistry::global().get("erf").elementwise_expr(b, {scaled}, {})[0];
    const int one_plus = b.binary(ExprOp::kAdd, erf, b.constant(1.0, DType::kF32));
    value = b.binary(ExprOp::kMul, b.binary(ExprOp::kMul, value, b.constant(0.5, DType::kF32)),
                     one_plus);
  }
  b.output(value, g.dtype, {1, g.ldc}, /*per_row=*/true);
  out.output_slots.push_back(launch.c_slot);
  out.output_offsets.push_back(0);
  b.spec().thread_rows = true;
  out.spec = b.build();
  return out;
}

bool tiny_k_gemm_chosen(const GemmLaunch& launch, runtime::Device device, bool can_measure,
                        std::optional<SmallMGemmMode> requested) {
  if (!tiny_k_gemm_qualifies(launch) || small_m_gemm_mode(requested) == SmallMGemmMode::kOff) {
    return false;
  }
  if (launch.exact_gelu) {
    // Note [Exact gelu in the tiny-K GEMM]: the lowering asked for this kernel
    // (only it applies the epilogue), having checked the switches.
    GROVE_CHECK(tiny_k_gemm_qualifies(launch),
                "tiny-K GEMM: ", small_m_gemm_tuning_key("", launch.args),
                " carries the exact gelu but does not qualify for grove's kernel (a grove bug; "
                "please report it; GROVE_TINY_K_EXACT_GELU=0 avoids it)");
    return true;
  }
  const char* value = std::getenv("GROVE_TINY_K_GEMM");
  const std::string setting = value == nullptr ? "auto" : value;
  GROVE_CHECK_AS(ConfigError, setting == "auto" || setting == "on" || setting == "off",
                 "GROVE_TINY_K_GEMM='", setting,
                 "': expected auto (the default: grove's tiny-K kernel where it measures faster "
                 "than the library on cuda), on (wherever it qualifies) or off");
  if (setting != "auto") return setting == "on";
  if (!device.is_cuda() || !can_measure || !runtime::device_available(device) ||
      small_m_gemm_mode(requested) != SmallMGemmMode::kAuto) {
    return false;
  }
  return tiny_k_gemm_measured_faster(launch, device);
}

}  // namespace grove::compiler::lowering
