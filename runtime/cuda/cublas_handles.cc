#include "runtime/cuda/cublas_handles.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/compile_profile.h"
#include "runtime/cuda/blas.h"
#include "runtime/cuda/cuda_error.h"

namespace grove::runtime {
namespace cuda_detail {
namespace {

constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

struct HandleRegistry {
  std::mutex mutex;
  std::map<std::pair<int, cudaStream_t>, StreamHandleState> handles;
  // Note [cuBLAS state of destroyed streams]: per device index.
  std::map<int, std::vector<StreamHandleState>> recycled;
};

HandleRegistry& registry() {
  static auto* instance = new HandleRegistry();  // handles live until exit
  return *instance;
}

void use_device(int index) {
  int current = -1;
  GROVE_CUDA_CHECK(cudaGetDevice(&current), "reading the current device for cuBLAS");
  if (current != index) GROVE_CUDA_CHECK(cudaSetDevice(index), "making cuda:", index, " current");
}

}  // namespace

size_t workspace_bytes() {
  const char* value = std::getenv("GROVE_CUBLAS_WORKSPACE_BYTES");
  if (value == nullptr) return kDefaultWorkspaceBytes;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0', "GROVE_CUBLAS_WORKSPACE_BYTES='", value,
                 "': expected a number of bytes");
  return static_cast<size_t>(parsed);
}

// Creation switches the thread to relaxed capture mode (Note [Allocating
// during capture] in cuda_platform.cc): the workspace is plain cudaMalloc
// memory outside every pool and graph, and cublasCreate's own set-up is not
// stream work.
const StreamHandleState& stream_handle_state(const CublasLibrary& library, Device device,
                                             StreamHandle stream) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "cuBLAS GEMM on ", device.str(),
                 ": cuBLAS runs on cuda devices only; run GEMMs through the device's BLAS "
                 "(Platform::blas()) on ",
                 device.str());
  GROVE_CHECK_AS(DeviceError, !stream.is_default(), "cuBLAS GEMM on the legacy default stream of ",
                 device.str(), ": pass a stream from DeviceContext::create_stream()");
  use_device(device.index);
  HandleRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto key = std::make_pair(device.index, static_cast<cudaStream_t>(stream.impl));
  if (auto it = r.handles.find(key); it != r.handles.end()) return it->second;
  RelaxedCaptureModeGuard relaxed;
  StreamHandleState state;
  std::string where = str_cat("setting up cuBLAS for a stream of ", device.str());
  // Note [cuBLAS state of destroyed streams].
  if (std::vector<StreamHandleState>& spare = r.recycled[device.index]; !spare.empty()) {
    state = spare.back();
    // Note [cuBLAS workspace after cublasSetStream]: cublasSetStream resets
    // the handle's workspace to cuBLAS's default pool, which under capture
    // allocates with cudaMallocAsync: a graph then holds mem alloc and free
    // nodes (one pair per split-K GEMM), which a WHILE body refuses (the
    // LLaMA-1B decode loop did). So the inherited workspace is bound again
    // after every cublasSetStream. Test (cuda):
    // CudaPlatformTest.GemmCapturedOnAnInheritedHandleHoldsKernelsOnly.
    check_cublas(library, library.set_stream(state.handle, key.second), "cublasSetStream", where);
    check_cublas(library,
                 library.set_workspace(state.handle, state.workspace, state.workspace_bytes),
                 "cublasSetWorkspace", where);
    spare.pop_back();
    return r.handles.emplace(key, state).first->second;
  }
  size_t bytes = 0;
  CompileEventTimer timer("blas setup", "cublasCreate");
  check_cublas(library, library.create(&state.handle), "cublasCreate", where);
  try {
    check_cublas(library, library.set_stream(state.handle, key.second), "cublasSetStream", where);
    bytes = workspace_bytes();
    if (bytes > 0) {
      GROVE_CUDA_CHECK(cudaMalloc(&state.workspace, bytes), "allocating the ", bytes,
                       "-byte cuBLAS workspace of a stream of ", device.str());
    }
    check_cublas(library, library.set_workspace(state.handle, state.workspace, bytes),
                 "cublasSetWorkspace", where);
  } catch (...) {
    library.destroy(state.handle);
    if (state.workspace != nullptr) cudaFree(state.workspace);
    throw;
  }
  state.workspace_bytes = bytes;
  return r.handles.emplace(key, state).first->second;
}

}  // namespace cuda_detail

void recycle_gemm_state(Device device, StreamHandle stream) {
  cuda_detail::HandleRegistry& r = cuda_detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.handles.find(std::make_pair(device.index, static_cast<cudaStream_t>(stream.impl)));
  if (it == r.handles.end()) return;
  r.recycled[device.index].push_back(it->second);
  r.handles.erase(it);
}

size_t gemm_state_count(Device device) {
  cuda_detail::HandleRegistry& r = cuda_detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  size_t count = r.recycled[device.index].size();
  for (const auto& [key, state] : r.handles) count += key.first == device.index ? 1 : 0;
  return count;
}

void prepare_gemm(Device device, StreamHandle stream) {
  cuda_detail::stream_handle_state(cuda_detail::require_cublas(), device, stream);
}

}  // namespace grove::runtime
