#include "runtime/cuda/gemm_algorithm_search.h"

#include <cuda_runtime_api.h>

#include <limits>

#include "runtime/cuda/cuda_error.h"
#include "runtime/logging.h"

namespace grove::runtime::cuda_detail {
namespace {

// Device memory, a stream and events of one search, released on every path out.
class SearchResources {
 public:
  ~SearchResources() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    for (void* pointer : pointers_) cudaFree(pointer);
  }
  void* zeros(size_t bytes) {
    void* pointer = nullptr;
    GROVE_CUDA_CHECK(cudaMalloc(&pointer, std::max<size_t>(bytes, 256)),
                     "allocating scratch memory for a GEMM algorithm search");
    pointers_.push_back(pointer);
    GROVE_CUDA_CHECK(cudaMemsetAsync(pointer, 0, bytes, stream()), "clearing scratch memory");
    return pointer;
  }
  cudaStream_t stream() {
    if (stream_ == nullptr) {
      GROVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                       "creating the GEMM algorithm search's stream");
      GROVE_CUDA_CHECK(cudaEventCreate(&start_), "creating a timing event");
      GROVE_CUDA_CHECK(cudaEventCreate(&stop_), "creating a timing event");
    }
    return stream_;
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<void*> pointers_;
};

// Bytes a column-major matrix of `cols` columns and leading dimension `ld` spans.
size_t matrix_bytes(int64_t ld, int64_t cols, DType dtype) {
  return static_cast<size_t>(ld) * static_cast<size_t>(cols) * dtype_size(dtype);
}

// GPU microseconds per launch of `algo`, from a graph of kGemmSearchLaunches
// launches; infinity when cuBLASLt refuses it.
double time_candidate(const CublasLibrary& library, const GemmSearch& search,
                      const cublasLtMatmulAlgo_t& algo, const void* a, const void* b, void* c,
                      void* workspace, size_t workspace_bytes, SearchResources& resources) {
  const GemmArgs& g = *search.g;
  cudaStream_t stream = resources.stream();
  auto matmul = [&] {
    return library.lt_matmul(search.handle, search.desc, &g.alpha, a, search.a, b, search.b,
                             &g.beta, c, search.c, c, search.c, &algo, workspace, workspace_bytes,
                             stream);
  };
  if (matmul() != CUBLAS_STATUS_SUCCESS) return std::numeric_limits<double>::infinity();
  GROVE_CUDA_CHECK(cudaStreamSynchronize(stream), "running a GEMM algorithm candidate");
  GROVE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                   "capturing GEMM algorithm candidates");
  bool ok = true;
  for (int i = 0; i < kGemmSearchLaunches && ok; ++i) ok = matmul() == CUBLAS_STATUS_SUCCESS;
  cudaGraph_t graph = nullptr;
  GROVE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph), "capturing GEMM algorithm candidates");
  if (!ok) {
    cudaGraphDestroy(graph);
    return std::numeric_limits<double>::infinity();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  GROVE_CUDA_CHECK(instantiated, "instantiating GEMM algorithm candidates");
  float ms = 0.0f;
  cudaError_t status = cudaGraphLaunch(exec, stream);  // warm: the graph's first upload
  if (status == cudaSuccess) status = cudaEventRecord(resources.start(), stream);
  if (status == cudaSuccess) status = cudaGraphLaunch(exec, stream);
  if (status == cudaSuccess) status = cudaEventRecord(resources.stop(), stream);
  if (status == cudaSuccess) status = cudaEventSynchronize(resources.stop());
  if (status == cudaSuccess)
    status = cudaEventElapsedTime(&ms, resources.start(), resources.stop());
  cudaGraphExecDestroy(exec);
  GROVE_CUDA_CHECK(status, "timing GEMM algorithm candidates");
  return 1000.0 * ms / kGemmSearchLaunches;
}

}  // namespace

size_t fastest_candidate(const CublasLibrary& library, const GemmSearch& search) {
  if (search.candidates.size() < 2) return 0;
  const GemmArgs& g = *search.g;
  try {
    SearchResources resources;
    size_t workspace_bytes = 0;
    for (const cublasLtMatmulHeuristicResult_t& candidate : search.candidates) {
      workspace_bytes = std::max(workspace_bytes, candidate.workspaceSize);
    }
    // Scratch operands of the GEMM's sizes (the real ones may be in use on
    // the caller's stream); C is cleared, so beta reads zeros.
    const void* a = resources.zeros(matrix_bytes(g.lda, g.transpose_a ? g.m : g.k, g.dtype));
    const void* b = resources.zeros(matrix_bytes(g.ldb, g.transpose_b ? g.k : g.n, g.dtype));
    void* c = resources.zeros(matrix_bytes(g.ldc, g.n, g.dtype));
    void* workspace = workspace_bytes > 0 ? resources.zeros(workspace_bytes) : nullptr;
    std::vector<double> best(search.candidates.size(), std::numeric_limits<double>::infinity());
    for (int round = 0; round < kGemmSearchRounds; ++round) {
      for (size_t i = 0; i < search.candidates.size(); ++i) {
        best[i] = std::min(best[i], time_candidate(library, search, search.candidates[i].algo, a, b,
                                                   c, workspace, workspace_bytes, resources));
      }
    }
    size_t fastest = 0;
    for (size_t i = 1; i < best.size(); ++i) {
      if (best[i] < best[fastest]) fastest = i;
    }
    if (!(best[fastest] < std::numeric_limits<double>::infinity())) return 0;
    log(LogLevel::kInfo,
        str_cat("GEMM search: m ", g.m, " n ", g.n, " k ", g.k, " (", dtype_name(g.dtype), ", ",
                gemm_epilogue_name(g.epilogue), "): candidate ", fastest, " of ", best.size(),
                " at ", best[fastest], " us, the heuristic's first at ", best[0], " us"));
    return fastest;
  } catch (const Error& error) {
    log(LogLevel::kWarn,
        str_cat("GEMM search: could not time the algorithms of m ", g.m, " n ", g.n, " k ", g.k,
                " on ", search.device.str(), " (", error.what(), "); using cuBLASLt's heuristic"));
    cudaGetLastError();  // a failed launch leaves no sticky state for the next call
    return 0;
  }
}

}  // namespace grove::runtime::cuda_detail
