// CudaPlatform: the Platform interface over the CUDA runtime API. Internal to
// runtime/cuda; everything else reaches it through make_cuda_platform().
// cuda_platform.cc holds memory, streams, events, kernels and capture;
// cuda_graphs.cc holds instantiation, launch, update and inspection of graphs.
//
// Handles: StreamHandle::impl is the cudaStream_t and EventHandle::impl the
// cudaEvent_t themselves (no indirection on the launch path); KernelHandle,
// GraphHandle and GraphExecHandle point at the structs below.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/blas.h"
#include "runtime/cuda/kernel_loader.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

// A kernel launch grove made during capture: which kernel, with which slots.
struct LaunchRecord {
  const CudaKernel* kernel = nullptr;
  LaunchDims dims;
  KernelArgs args;
};
using LaunchTable = std::unordered_map<cudaGraphNode_t, LaunchRecord>;

// Note [Graph lifetime]: a graph is released when its handle is destroyed and
// no executable graph was instantiated from it. cudaGraphExecKernelNodeSetParams
// names nodes of the graph an exec was instantiated from, and GraphRecording
// destroys that graph after a successful exec update, so each exec keeps a
// reference to its source graph.
struct CudaGraph {
  cudaGraph_t graph = nullptr;
  LaunchTable launches;  // grove's kernel nodes and their arguments
  std::optional<std::vector<cudaGraphNode_t>> kernel_nodes;  // in cudaGraphGetNodes order
  int references = 1;
};

struct CudaGraphExec {
  cudaGraphExec_t exec = nullptr;
  CudaGraph* source = nullptr;  // holds a reference (Note [Graph lifetime])
};

class CudaPlatform final : public Platform {
 public:
  explicit CudaPlatform(int index);
  ~CudaPlatform() override;

  Device device() const override { return Device{DeviceType::kCuda, index_}; }
  std::string name() const override { return name_; }

  MemoryInfo memory_info() override;
  int multiprocessor_count() const override { return multiprocessors_; }
  bool streams_asynchronous() const override { return true; }
  void* allocate_raw(size_t bytes) override;
  void free_raw(void* pointer) override;
  void* allocate_host_pinned(size_t bytes) override;
  void free_host_pinned(void* pointer) override;
  void copy_async(void* destination, const void* source, size_t bytes, CopyKind kind,
                  StreamHandle stream) override;
  void memset_async(void* destination, int byte_value, size_t bytes, StreamHandle stream) override;

  StreamHandle create_stream() override;
  StreamHandle create_legacy_ordered_stream() override;
  void destroy_stream(StreamHandle stream) override;
  void synchronize_stream(StreamHandle stream) override;
  void synchronize_device() override;

  EventHandle create_event(bool enable_timing) override;
  void destroy_event(EventHandle event) override;
  void record_event(EventHandle event, StreamHandle stream) override;
  void stream_wait_event(StreamHandle stream, EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  float elapsed_ms(EventHandle start, EventHandle end) override;

  KernelHandle load_kernel(const KernelSource& source) override;
  void wait_for_kernel_loads() override;
  void launch_kernel(KernelHandle kernel, const LaunchDims& dims, const KernelArgs& args,
                     StreamHandle stream) override;
  void launch_host_function(StreamHandle stream, void (*function)(void*), void* user_data) override;

  void begin_capture(StreamHandle stream, CaptureMode mode) override;
  GraphHandle end_capture(StreamHandle stream) override;
  CaptureStatus capture_status(StreamHandle stream) override;
  void invalidate_capture(StreamHandle stream) override;

  GraphExecHandle instantiate(GraphHandle graph, const InstantiateOptions& options) override;
  void launch_graph(GraphExecHandle exec, StreamHandle stream) override;
  ExecUpdateResult update_graph_exec(GraphExecHandle exec, GraphHandle graph) override;
  std::vector<KernelNodeInfo> kernel_nodes(GraphHandle graph) override;
  void set_kernel_node_args(GraphExecHandle exec, GraphHandle graph, size_t kernel_node_index,
                            const KernelArgs& args) override;
  size_t add_head_kernel_node(GraphHandle graph, KernelHandle kernel, const LaunchDims& dims,
                              const KernelArgs& args) override;
  GraphHandle create_graph() override;
  uint64_t create_while_condition(GraphHandle graph, bool initial) override;
  void add_while_node(GraphHandle graph, uint64_t condition, GraphHandle body) override;
  size_t graph_node_count(GraphHandle graph) override;
  size_t graph_programmatic_edge_count(GraphHandle graph) override;
  std::string graph_dot(GraphHandle graph) override;
  void destroy_graph(GraphHandle graph) override;
  void destroy_graph_exec(GraphExecHandle exec) override;

  BlasSupport& blas() override { return *blas_; }

 private:
  // Makes cuda:index_ the calling thread's current device.
  void use_device() const;
  std::string where() const;  // "cuda:0 (NVIDIA H200)"
  void record_captured_launch(cudaStream_t stream, const CudaKernel* kernel, const LaunchDims& dims,
                              const KernelArgs& args);
  std::string kernel_change(CudaGraph& from, CudaGraph& to);
  const std::vector<cudaGraphNode_t>& kernel_nodes_of(CudaGraph& graph);
  std::string kernel_node_name(CudaGraph& graph, cudaGraphNode_t node);
  void release_graph(CudaGraph* graph) noexcept;
  // Note [Unsafe calls during capture] in cuda_platform.cc.
  void forbid_legacy_stream_during_capture(const char* what);
  void check_unsafe_call(cudaError_t status, const char* call, const std::string& doing);
  // Marks the captures that forbid an unsafe call on this thread as invalidated;
  // returns how many.
  int invalidate_forbidding_captures(const std::string& reason);
  bool captures_forbid_this_thread();
  void synchronize_streams_outside_capture();
  cudaStream_t upload_stream();

  int index_;
  std::string name_;
  int multiprocessors_ = 1;
  // Kernels with KernelSource::ptx_programmatic run it (Note [Programmatic
  // dependent launch]): compute capability 9.0 or newer, and
  // GROVE_PROGRAMMATIC_LAUNCH is not 0.
  bool programmatic_launch_ = false;
  std::mutex mutex_;
  // Libraries by PTX text or image (the key is the text their load reads),
  // loaded or being loaded (Note [Kernels loaded in the background]).
  std::map<std::string, std::shared_future<cudaLibrary_t>> libraries_;
  std::map<std::pair<const std::string*, std::string>, CudaKernel*> kernels_by_name_;
  std::deque<CudaKernel> kernels_;
  std::vector<const CudaKernel*> pending_kernels_;  // loaded in the background, not yet waited for
  std::unique_ptr<KernelLoader> loader_;
  // Captures this platform began, by stream, and the launches recorded into each.
  std::atomic<int> active_captures_{0};
  struct ActiveCapture {
    unsigned long long id = 0;
    CaptureMode mode = CaptureMode::kThreadLocal;
    std::thread::id thread;
  };
  std::unordered_map<cudaStream_t, ActiveCapture> captures_;
  std::unordered_map<unsigned long long, LaunchTable> capture_launches_;
  std::unordered_map<cudaStream_t, std::string> invalidated_by_grove_;
  cudaStream_t upload_stream_ = nullptr;
  std::unordered_map<cudaStream_t, bool>
      streams_;                        // created here (Note [Unsafe calls during capture])
  std::unique_ptr<BlasSupport> blas_;  // cuBLAS (blas.h)
};

}  // namespace grove::runtime::cuda_detail
