#include "runtime/cuda/cublaslt_plans.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "runtime/compile_profile.h"
#include "runtime/cuda/cublas_handles.h"
#include "runtime/cuda/cuda_error.h"
#include "runtime/cuda/gemm_algorithm_search.h"
#include "runtime/logging.h"

namespace grove::runtime {
namespace cuda_detail {
namespace {

// Note [GEMM epilogues]: a GEMM with an epilogue is one cublasLtMatmul. Its
// plan (operation descriptor, matrix layouts and the algorithm cuBLASLt's
// heuristic picks for our workspace) is made once per shape, epilogue and
// pointer alignment and cached, so eager calls and graph captures of the same
// GEMM run the same kernel (eager == cudagraphs bitwise). The heuristic is told
// the real alignment of every pointer (it assumes 256 bytes otherwise).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

struct LtKey {
  int device = 0;
  DType dtype = DType::kF32;
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  int64_t ld_aux = 0;
  uint32_t alignments[5] = {0, 0, 0, 0, 0};  // A, B, C, bias, aux
  size_t workspace = 0;
  bool searched = false;  // Note [GEMM algorithms by measurement]
  auto tie() const {
    return std::tie(device, dtype, transpose_a, transpose_b, m, n, k, lda, ldb, ldc, epilogue,
                    ld_aux, alignments[0], alignments[1], alignments[2], alignments[3],
                    alignments[4], workspace, searched);
  }
  bool operator<(const LtKey& other) const { return tie() < other.tie(); }
};

struct LtRegistry {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;  // per device
  std::map<LtKey, LtPlan> plans;
};

LtRegistry& lt_registry() {
  static auto* instance = new LtRegistry();  // plans live until exit
  return *instance;
}

uint32_t alignment_of(const void* pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

template <typename T>
void set_desc(const CublasLibrary& library, cublasLtMatmulDesc_t desc,
              cublasLtMatmulDescAttributes_t attribute, const T& value, const GemmWhat& doing) {
  check_cublas(library, library.lt_desc_set(desc, attribute, &value, sizeof(value)),
               "cublasLtMatmulDescSetAttribute", doing);
}

bool is_bias_gradient(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kBiasGradA || epilogue == GemmEpilogue::kBiasGradB;
}

bool uses_aux(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kBiasGeluAux || epilogue == GemmEpilogue::kDGelu;
}

// The vector cuBLASLt's BIAS_POINTER names: read (bias) or written (bias gradient).
const void* bias_pointer(const GemmArgs& g) {
  return is_bias_gradient(g.epilogue) ? g.bias_grad : g.bias;
}

// Whether `g` may have its algorithm searched: its epilogue only reads (the
// search runs the real bias pointer) and it is one GEMM.
bool searchable(const GemmArgs& g) {
  return (g.epilogue == GemmEpilogue::kNone || g.epilogue == GemmEpilogue::kBias) &&
         g.batch_count == 1;
}

// Makes the plan of `key` (caller holds the registry's mutex). The heuristic
// reads the bias and aux pointers' alignment from the descriptor, so this
// call's pointers (of the alignments in `key`) are set before it runs. With
// key.searched, the fastest of the heuristic's candidates (Note [GEMM
// algorithms by measurement]), or its first when `stream` is capturing.
LtPlan make_plan(const CublasLibrary& library, cublasLtHandle_t handle, const LtKey& key,
                 const GemmArgs& g, const GemmWhat& doing, cudaStream_t stream) {
  cudaDataType type = cuda_data_type(key.dtype);
  LtPlan plan;
  check_cublas(library, library.lt_desc_create(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate", doing);
  cublasLtMatmulPreference_t preference = nullptr;
  try {
    set_desc<int32_t>(library, plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                      key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, doing);
    set_desc<int32_t>(library, plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                      key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, doing);
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (key.epilogue == GemmEpilogue::kBias) epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (key.epilogue == GemmEpilogue::kBiasGelu) epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    if (key.epilogue == GemmEpilogue::kBiasRelu) epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    if (key.epilogue == GemmEpilogue::kBiasGeluAux) epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (key.epilogue == GemmEpilogue::kBiasGradA) epilogue = CUBLASLT_EPILOGUE_BGRADA;
    if (key.epilogue == GemmEpilogue::kBiasGradB) epilogue = CUBLASLT_EPILOGUE_BGRADB;
    if (key.epilogue == GemmEpilogue::kDGelu) epilogue = CUBLASLT_EPILOGUE_DGELU;
    set_desc<int32_t>(library, plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, doing);
    if (key.epilogue != GemmEpilogue::kDGelu && key.epilogue != GemmEpilogue::kNone) {
      set_desc<int32_t>(library, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, type, doing);
      set_desc(library, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_pointer(g), doing);
    }
    if (uses_aux(key.epilogue)) {
      // Note [GEMM auxiliary output]: the pre-activation, of C's type (the aux
      // data type is left unset: it then defaults to the output's) and layout.
      set_desc<int64_t>(library, plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.ld_aux,
                        doing);
      set_desc(library, plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux, doing);
    }
    auto layout = [&](cublasLtMatrixLayout_t* out, int64_t rows, int64_t cols, int64_t ld) {
      check_cublas(library,
                   library.lt_layout_create(out, type, static_cast<uint64_t>(rows),
                                            static_cast<uint64_t>(cols), ld),
                   "cublasLtMatrixLayoutCreate", doing);
    };
    layout(&plan.a, key.transpose_a ? key.k : key.m, key.transpose_a ? key.m : key.k, key.lda);
    layout(&plan.b, key.transpose_b ? key.n : key.k, key.transpose_b ? key.k : key.n, key.ldb);
    layout(&plan.c, key.m, key.n, key.ldc);
    check_cublas(library, library.lt_preference_create(&preference),
                 "cublasLtMatmulPreferenceCreate", doing);
    auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
      check_cublas(library, library.lt_preference_set(preference, attribute, &value, sizeof(value)),
                   "cublasLtMatmulPreferenceSetAttribute", doing);
    };
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(key.workspace));
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignments[0]);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignments[1]);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignments[2]);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignments[2]);
    std::vector<cublasLtMatmulHeuristicResult_t> results(key.searched ? kGemmSearchCandidates : 1);
    int found = 0;
    check_cublas(library,
                 library.lt_heuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c, preference,
                                      static_cast<int>(results.size()), results.data(), &found),
                 "cublasLtMatmulAlgoGetHeuristic", doing);
    GROVE_CHECK_AS(DeviceError, found > 0 && results[0].state == CUBLAS_STATUS_SUCCESS,
                   "cuBLASLt has no algorithm for ", doing,
                   "; set GROVE_GEMM_EPILOGUES=0 to run the bias and gelu as separate kernels");
    results.resize(static_cast<size_t>(found));
    size_t chosen = 0;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (key.searched && cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
        capturing == cudaStreamCaptureStatusNone) {
      GemmSearch search{handle, plan.desc, plan.a, plan.b, plan.c, &g, doing.device, results};
      chosen = fastest_candidate(library, search);
    }
    plan.algo = results[chosen].algo;
    plan.workspace = results[chosen].workspaceSize;
    library.lt_preference_destroy(preference);
  } catch (...) {
    if (preference != nullptr) library.lt_preference_destroy(preference);
    for (cublasLtMatrixLayout_t layout : {plan.a, plan.b, plan.c}) {
      if (layout != nullptr) library.lt_layout_destroy(layout);
    }
    library.lt_desc_destroy(plan.desc);
    throw;
  }
  return plan;
}

// The most workspace cuBLASLt's heuristic may plan for: the stream's
// workspace, or less with GROVE_CUBLASLT_WORKSPACE_CAP (bytes), for A/Bs of
// the algorithms a smaller workspace (PyTorch's) leads the heuristic to. The
// cap is part of a plan's key, so one process can time both.
size_t heuristic_workspace_cap() {
  const char* value = std::getenv("GROVE_CUBLASLT_WORKSPACE_CAP");
  if (value == nullptr || *value == '\0') return std::numeric_limits<size_t>::max();
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(value, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0', "GROVE_CUBLASLT_WORKSPACE_CAP='", value,
                 "': expected a number of bytes");
  return static_cast<size_t>(parsed);
}

// GROVE_BIAS_GRAD_EPILOGUES: "1" lets the probe decide whether cuda runs a
// weight-gradient GEMM's bias gradient as its BGRAD epilogue (Note
// [Bias-gradient epilogues on cuda]); unset or "0" never; else ConfigError.
bool bias_gradient_epilogues_probed() {
  const char* value = std::getenv("GROVE_BIAS_GRAD_EPILOGUES");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "0") return false;
  GROVE_CHECK_AS(ConfigError, std::string_view(value) == "1", "GROVE_BIAS_GRAD_EPILOGUES='", value,
                 "': expected 0 or 1");
  return true;
}

}  // namespace

void gemm_with_epilogue(const CublasLibrary& library, Device device, StreamHandle stream,
                        const GemmArgs& g, const GemmWhat& doing) {
  GROVE_CHECK_AS(DeviceError, library.lt_ok,
                 "cuBLASLt (libcublasLt.so.13) lacks entry points grove needs for ", doing,
                 "; set GROVE_GEMM_EPILOGUES=0 to run the bias and gelu as separate kernels");
  GROVE_CHECK_AS(ShapeError, g.batch_count == 1, "cuBLAS GEMM with a ",
                 gemm_epilogue_name(g.epilogue), " epilogue: batch_count must be 1, found ",
                 g.batch_count);
  GROVE_CHECK(g.epilogue == GemmEpilogue::kDGelu || g.epilogue == GemmEpilogue::kNone ||
                  bias_pointer(g) != nullptr,
              "cuBLAS GEMM with a ", gemm_epilogue_name(g.epilogue), " epilogue: the ",
              is_bias_gradient(g.epilogue) ? "bias_grad" : "bias", " pointer is null");
  if (is_bias_gradient(g.epilogue) || g.epilogue == GemmEpilogue::kDGelu) {
    // Note [GEMM bias gradients].
    GROVE_CHECK_AS(ShapeError, g.alpha == 1.0f && g.beta == 0.0f, "cuBLAS GEMM with a ",
                   gemm_epilogue_name(g.epilogue), " epilogue needs alpha 1 and beta 0, found ",
                   g.alpha, " and ", g.beta, "; compute the bias gradient separately");
  }
  if (uses_aux(g.epilogue)) {
    // Note [GEMM auxiliary output].
    GROVE_CHECK(
        g.aux != nullptr, "cuBLAS GEMM with a ", gemm_epilogue_name(g.epilogue),
        " epilogue: the aux pointer is null; pass the pre-activation's buffer (m x n like C)");
    GROVE_CHECK_AS(ShapeError, g.ld_aux >= g.m && g.ld_aux % 8 == 0, "cuBLAS GEMM with a ",
                   gemm_epilogue_name(g.epilogue), " epilogue: ld_aux = ", g.ld_aux,
                   " but cuBLASLt needs a multiple of 8 that is at least C's ", g.m,
                   " rows (column-major); run the gelu (or its gradient) as a separate kernel");
  }
  const StreamHandleState& state = stream_handle_state(library, device, stream);
  LtKey key;
  key.device = device.index;
  key.dtype = g.dtype;
  key.transpose_a = g.transpose_a, key.transpose_b = g.transpose_b;
  key.m = g.m, key.n = g.n, key.k = g.k, key.lda = g.lda, key.ldb = g.ldb, key.ldc = g.ldc;
  key.epilogue = g.epilogue;
  key.alignments[0] = alignment_of(g.a);
  key.alignments[1] = alignment_of(g.b);
  key.alignments[2] = alignment_of(g.c);
  key.alignments[3] = alignment_of(bias_pointer(g));
  if (uses_aux(g.epilogue)) {
    key.ld_aux = g.ld_aux;
    key.alignments[4] = alignment_of(g.aux);
  }
  key.workspace = std::min(state.workspace_bytes, heuristic_workspace_cap());
  key.searched = searchable(g) && (g.search || runtime::gemm_search_enabled());
  LtRegistry& r = lt_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto handle = r.handles.find(device.index);
  if (handle == r.handles.end()) {
    RelaxedCaptureModeGuard relaxed;
    CompileEventTimer timer("blas setup", "cublasLtCreate");
    cublasLtHandle_t created = nullptr;
    check_cublas(library, library.lt_create(&created), "cublasLtCreate", doing);
    handle = r.handles.emplace(device.index, created).first;
  }
  auto plan = r.plans.find(key);
  if (plan == r.plans.end()) {
    RelaxedCaptureModeGuard relaxed;
    CompileEventTimer timer("blas plan", "cublasLt plan");
    plan = r.plans
               .emplace(key, make_plan(library, handle->second, key, g, doing,
                                       static_cast<cudaStream_t>(stream.impl)))
               .first;
  }
  const LtPlan& p = plan->second;
  if (g.epilogue != GemmEpilogue::kDGelu && g.epilogue != GemmEpilogue::kNone) {
    set_desc(library, p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_pointer(g), doing);
  }
  if (uses_aux(g.epilogue)) {
    set_desc(library, p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux, doing);
  }
  check_cublas(library,
               library.lt_matmul(handle->second, p.desc, &g.alpha, g.a, p.a, g.b, p.b, &g.beta, g.c,
                                 p.c, g.c, p.c, &p.algo, state.workspace, state.workspace_bytes,
                                 static_cast<cudaStream_t>(stream.impl)),
               "cublasLtMatmul", doing);
}

bool row_major_epilogue_available(Device device, GemmEpilogue epilogue, DType dtype, int64_t m,
                                  int64_t n, int64_t k) {
  if (epilogue == GemmEpilogue::kNone) return true;
  // Note [Bias-gradient epilogues on cuda]: on an H200 (CUDA 13.0) the probe
  // below found BGRADB for the weight-gradient GEMM, yet the real calls of
  // the gpt4x256 backward (k = 8) and of small fuzzed programs (k = 1) failed
  // with CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmulAlgoGetHeuristic. Until
  // the probe reproduces what makes those calls differ, cuda computes bias
  // gradients with the `sum` kernel; sim and cpu keep the fused form.
  // GROVE_BIAS_GRAD_EPILOGUES=1 lets the probe decide (A/B timing; a real
  // call cuBLASLt then refuses fails naming its GEMM). Session 20, r1 (H100,
  // CUDA 13.0): with it, gpt4x256's whole step compiled and ran, its losses
  // bitwise equal to the step without it and its time within the noise
  // (1163.1 against 1168.8 us): the probe found no f32 BGRAD epilogue for
  // these GEMMs, so the 29 bias-gradient sums stayed kernels.
  if ((epilogue == GemmEpilogue::kBiasGradA || epilogue == GemmEpilogue::kBiasGradB) &&
      !bias_gradient_epilogues_probed()) {
    return false;
  }
  static std::mutex mutex;
  static auto* known =
      new std::map<std::tuple<int, GemmEpilogue, DType, int64_t, int64_t, int64_t>, bool>();
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device.index, epilogue, dtype, m, n, k);
  if (auto found = known->find(key); found != known->end()) return found->second;
  bool available = false;
  try {
    const CublasLibrary& library = require_cublas();
    if (library.lt_ok && device.is_cuda()) {
      // Column-major after gemm_row_major's swap; pointers are only looked at
      // for their alignment (256 bytes, as pool blocks are).
      LtKey probe;
      probe.device = device.index;
      probe.dtype = dtype;
      // gemm_row_major's swap: cuBLAS's m is the row-major n, and vice versa.
      probe.m = static_cast<int>(n);
      probe.n = static_cast<int>(m);
      probe.k = static_cast<int>(k);
      probe.epilogue = epilogue;
      if (epilogue == GemmEpilogue::kBiasGradA) probe.epilogue = GemmEpilogue::kBiasGradB;
      if (epilogue == GemmEpilogue::kBiasGradB) probe.epilogue = GemmEpilogue::kBiasGradA;
      // Row-major linear: B (the weight) read transposed is cuBLAS's A; the
      // weight gradient G^T X: G read transposed is cuBLAS's B.
      probe.transpose_a = epilogue != GemmEpilogue::kBiasGradA;
      probe.transpose_b = epilogue == GemmEpilogue::kBiasGradA;
      // Leading dimensions of the operands as stored (column-major view).
      probe.lda = probe.transpose_a ? probe.k : probe.m;
      probe.ldb = probe.transpose_b ? probe.n : probe.k;
      probe.ldc = probe.m;
      probe.ld_aux = uses_aux(epilogue) ? probe.m : 0;
      for (uint32_t& alignment : probe.alignments) alignment = 256;
      probe.workspace = workspace_bytes();
      GemmArgs args;
      void* aligned = reinterpret_cast<void*>(uintptr_t{1} << 20);
      args.epilogue = probe.epilogue;
      args.bias = args.bias_grad = args.aux = aligned;
      const GemmWhat doing{args, device};
      LtRegistry& r = lt_registry();
      std::lock_guard<std::mutex> registry_lock(r.mutex);
      auto handle = r.handles.find(device.index);
      if (handle == r.handles.end()) {
        RelaxedCaptureModeGuard relaxed;
        CompileEventTimer timer("blas setup", "cublasLtCreate");
        cublasLtHandle_t created = nullptr;
        check_cublas(library, library.lt_create(&created), "cublasLtCreate", doing);
        handle = r.handles.emplace(device.index, created).first;
      }
      RelaxedCaptureModeGuard relaxed;
      CompileEventTimer timer("blas plan", "cublasLt epilogue probe");
      LtPlan plan = make_plan(library, handle->second, probe, args, doing, nullptr);
      library.lt_layout_destroy(plan.a);
      library.lt_layout_destroy(plan.b);
      library.lt_layout_destroy(plan.c);
      library.lt_desc_destroy(plan.desc);
      available = true;
    }
  } catch (const Error& error) {
    log(LogLevel::kInfo, str_cat("cuBLASLt has no ", gemm_epilogue_name(epilogue), " epilogue for ",
                                 dtype_name(dtype), " on ", device.str(), " (", error.what(),
                                 "); the lowering runs that work as kernels"));
  }
  known->emplace(key, available);
  return available;
}

}  // namespace cuda_detail
}  // namespace grove::runtime
