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

bool tiny_k_tall_enabled() {
  const char* value = std::getenv("GROVE_TINY_K_TALL");
  return value != nullptr && std::string(value) == "1";
}

bool tiny_k_gemm_tall(const GemmArgs& args) {
  return args.m >= kMinTallTinyKRows && tiny_k_tall_enabled();
}

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
// across 32 rows of C) choose the tiny-K kernel only by measurement, and the
// gelu keeps its kernel (unless GROVE_TINY_K_TALL=1: Note [Tall tiny-K GEMMs]).
// GROVE_TINY_K_EXACT_GELU=0 (or GROVE_TINY_K_GEMM=off) keeps the gelu's kernel
// everywhere. Tests:
// TinyKGemm.ExactGeluAfterABiasAddIsTheKernelsEpilogue.
//
// Note [Tall tiny-K GEMMs]: at more rows (MLP-Mixer's token-mixing fc1 at
// batch 16: C [8192, 256], K 16) the column-wise form's stores each touch 32
// rows of C, and the library's GEMM leaves the exact gelu a kernel of its own
// that reads and writes C again (8 MB each way; session 21, H100: 9.2 us for
// the GEMM and 6.9 for the gelu, per layer). There the iteration space is
// [M, N, K] instead: a warp's threads take consecutive columns n of one row m,
// so its stores are one contiguous run of C, its loads of A one address (a
// broadcast) and its loads of B rows of the small weight (L1-resident); each
// thread still folds its K products in increasing k, so the results equal the
// column-wise form's (and sim's) bitwise. The lowering then makes the exact
// gelu the epilogue past kMaxTinyKExactGeluRows rows too. Off unless
// GROVE_TINY_K_TALL=1: a warp's loads of B's rows are 64 B apart per lane at
// K = 16 (each of its K loads touching 16 lines of L1) where the column-wise
// form broadcasts one weight, so the form waits for its GPU A/B. Tests:
// TinyKGemm.TallGemmsRunRowWiseWithTheExactGelu.
AssembledKernel tiny_k_gemm_kernel(const GemmLaunch& launch) {
  const GemmArgs& g = launch.args;
  GROVE_CHECK(tiny_k_gemm_qualifies(launch), "tiny-K GEMM: ", small_m_gemm_tuning_key("", g),
              " does not qualify for grove's kernel (a grove bug; please report it)");
  std::string name = "tiny_k_gemm";
  if (g.epilogue != GemmEpilogue::kNone)
    name += std::string("_") + runtime::gemm_epilogue_name(g.epilogue);
  if (launch.exact_gelu) name += "_exact_gelu";
  // Note [Tall tiny-K GEMMs]: the iteration space is [M, N, K] when tall,
  // [N, M, K] otherwise; `rows_then_columns` orders a pair of strides (over m
  // and over n) to match.
  const bool tall = tiny_k_gemm_tall(g);
  if (tall) name += "_tall";
  auto over = [&](int64_t along_m, int64_t along_n, int64_t along_k) {
    return tall ? runtime::Shape{along_m, along_n, along_k}
                : runtime::Shape{along_n, along_m, along_k};
  };
  codegen::KernelBuilder b(name, over(g.m, g.n, g.k));
  AssembledKernel out;
  const int a = b.input(g.dtype, g.transpose_a ? over(1, 0, g.lda) : over(g.lda, 0, 1));
  out.input_slots.push_back(launch.a_slot);
  const int w = b.input(g.dtype, g.transpose_b ? over(0, g.ldb, 1) : over(0, 1, g.ldb));
  out.input_slots.push_back(launch.b_slot);
  const int sum = b.reduce(ReduceOp::kSum, b.binary(ExprOp::kMul, b.load(a), b.load(w)));
  int value = b.reduced(sum);
  if (g.epilogue != GemmEpilogue::kNone) {
    const int bias = b.input(g.dtype, over(0, 1, 0));
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
  // Over the rows of the iteration space: (n, m), or (m, n) when tall.
  b.output(value, g.dtype, tall ? runtime::Shape{g.ldc, 1} : runtime::Shape{1, g.ldc},
           /*per_row=*/true);
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
