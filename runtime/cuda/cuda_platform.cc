// The cuda Platform, part 1: device discovery, memory, copies, streams, events,
// kernels and stream capture. Graph instantiation, launch and inspection are in
// cuda_graphs.cc.
#include "runtime/cuda/cuda_platform.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>

#include "runtime/cuda/blas.h"
#include "runtime/cuda/cuda_error.h"
#include "runtime/cuda/cuda_platform_impl.h"
#include "runtime/cuda/ptx_entries.h"
#include "runtime/logging.h"

namespace grove::runtime {
namespace {

struct DeviceCount {
  int count = 0;
  std::string reason;
};

// Note [No driver]: libcudart_static.a loads libcuda.so.1 at its first call;
// where there is no driver, cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver ("CUDA driver version is insufficient for CUDA
// runtime version") and grove reports zero devices with that message instead
// of failing, so every binary runs on GPU-less machines (CI) with sim.
const DeviceCount& device_count_once() {
  static const DeviceCount result = [] {
    DeviceCount found;
    cudaError_t status = cudaGetDeviceCount(&found.count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      found.count = 0;
      found.reason = str_cat(cudaGetErrorString(status), " (", cudaGetErrorName(status),
                             " from cudaGetDeviceCount)");
    } else if (found.count == 0) {
      found.reason = "the CUDA driver reports no CUDA device (cudaGetDeviceCount returned 0)";
    }
    return found;
  }();
  return result;
}

}  // namespace

int cuda_device_count() { return device_count_once().count; }

std::string cuda_unavailable_reason() { return device_count_once().reason; }

int cuda_current_device() noexcept {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

void cuda_make_current(int index) noexcept {
  if (cudaSetDevice(index) != cudaSuccess) cudaGetLastError();
}

std::unique_ptr<Platform> make_cuda_platform(int index) {
  int count = cuda_device_count();
  GROVE_CHECK_AS(
      DeviceError, index >= 0 && index < count, "cuda:", index, " is not available: ",
      count == 0 ? cuda_unavailable_reason() : str_cat("there are ", count, " CUDA devices"));
  return std::make_unique<cuda_detail::CudaPlatform>(index);
}

namespace cuda_detail {
namespace {

cudaStream_t cuda_stream(StreamHandle stream) { return static_cast<cudaStream_t>(stream.impl); }
cudaEvent_t cuda_event(EventHandle event) { return static_cast<cudaEvent_t>(event.impl); }

cudaMemcpyKind cuda_copy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  throw Error("unknown CopyKind");
}

const char* copy_kind_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return "host-to-device";
    case CopyKind::kDeviceToHost:
      return "device-to-host";
    case CopyKind::kDeviceToDevice:
      return "device-to-device";
  }
  return "unknown";
}

cudaStreamCaptureMode cuda_capture_mode(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kGlobal:
      return cudaStreamCaptureModeGlobal;
    case CaptureMode::kThreadLocal:
      return cudaStreamCaptureModeThreadLocal;
    case CaptureMode::kRelaxed:
      return cudaStreamCaptureModeRelaxed;
  }
  throw Error("unknown CaptureMode");
}

std::string dims_str(const LaunchDims& dims) {
  return str_cat("grid (", dims.grid.x, ", ", dims.grid.y, ", ", dims.grid.z, "), block (",
                 dims.block.x, ", ", dims.block.y, ", ", dims.block.z, "), ", dims.shared_bytes,
                 " bytes of shared memory");
}

constexpr size_t kMaxInlineSlots = 32;

}  // namespace

CudaPlatform::CudaPlatform(int index)
    : index_(index),
      loader_(std::make_unique<KernelLoader>(index)),
      blas_(make_cublas_support(device(), *this)) {
  use_device();
  cudaDeviceProp properties{};
  GROVE_CUDA_CHECK(cudaGetDeviceProperties(&properties, index_),
                   "reading the properties of cuda:", index_);
  name_ = properties.name;
  multiprocessors_ = properties.multiProcessorCount;
  const char* programmatic = std::getenv("GROVE_PROGRAMMATIC_LAUNCH");
  programmatic_launch_ =
      properties.major >= 9 && !(programmatic != nullptr && std::string_view(programmatic) == "0");
}

CudaPlatform::~CudaPlatform() {
  // Errors are ignored: the process may be exiting and the driver shutting down.
  if (upload_stream_ != nullptr) cudaStreamDestroy(upload_stream_);
  loader_.reset();  // finishes the loads under way
  for (auto& [code, library] : libraries_) {
    if (!library.valid()) continue;
    try {
      cudaLibraryUnload(library.get());
    } catch (...) {
    }
  }
  cudaGetLastError();
}

void CudaPlatform::use_device() const {
  int current = -1;
  GROVE_CUDA_CHECK(cudaGetDevice(&current), "reading the calling thread's current device");
  if (current != index_) {
    GROVE_CUDA_CHECK(cudaSetDevice(index_), "making cuda:", index_, " the current device");
  }
}

std::string CudaPlatform::where() const { return str_cat("cuda:", index_, " (", name_, ")"); }

// Note [Allocating during capture]: the caching allocator may need a new
// segment while a stream captures into a private pool. cudaMalloc is not a
// stream operation, so the graph does not record it and replays never repeat
// it; CUDA still forbids it in global and thread-local capture modes because it
// may synchronize implicitly. The segment stays owned by the pool for as long
// as any graph uses it, so grove switches the thread to relaxed mode around the
// call (as PyTorch's allocator does). Freeing is different: cudaFree during a
// capture could release memory a graph still references, so it stays checked.
Platform::MemoryInfo CudaPlatform::memory_info() {
  use_device();
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  GROVE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the free memory of ",
                   where());
  return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

void* CudaPlatform::allocate_raw(size_t bytes) {
  use_device();
  void* pointer = nullptr;
  RelaxedCaptureModeGuard relaxed;
  GROVE_CUDA_CHECK(cudaMalloc(&pointer, bytes), "allocating a segment of ", bytes, " bytes on ",
                   where());
  return pointer;
}

void CudaPlatform::free_raw(void* pointer) {
  use_device();
  check_unsafe_call(cudaFree(pointer), "cudaFree",
                    str_cat("freeing the segment at ", pointer, " on ", where()));
}

void* CudaPlatform::allocate_host_pinned(size_t bytes) {
  use_device();
  void* pointer = nullptr;
  GROVE_CUDA_CHECK(cudaHostAlloc(&pointer, std::max<size_t>(bytes, 1),
                                 cudaHostAllocPortable | cudaHostAllocMapped),
                   "allocating ", bytes, " bytes of pinned host memory for ", where());
  return pointer;
}

void CudaPlatform::free_host_pinned(void* pointer) {
  if (pointer == nullptr) return;
  check_unsafe_call(cudaFreeHost(pointer), "cudaFreeHost",
                    str_cat("freeing pinned host memory at ", pointer, " for ", where()));
}

void CudaPlatform::copy_async(void* destination, const void* source, size_t bytes, CopyKind kind,
                              StreamHandle stream) {
  if (stream.is_default())
    forbid_legacy_stream_during_capture("copying on the legacy default stream");
  use_device();
  GROVE_CUDA_CHECK(
      cudaMemcpyAsync(destination, source, bytes, cuda_copy_kind(kind), cuda_stream(stream)),
      "copying ", bytes, " bytes ", copy_kind_name(kind), " from ", source, " to ", destination,
      " on ", where());
}

void CudaPlatform::memset_async(void* destination, int byte_value, size_t bytes,
                                StreamHandle stream) {
  if (stream.is_default())
    forbid_legacy_stream_during_capture("memset on the legacy default stream");
  use_device();
  GROVE_CUDA_CHECK(cudaMemsetAsync(destination, byte_value, bytes, cuda_stream(stream)), "setting ",
                   bytes, " bytes at ", destination, " to ", byte_value, " on ", where());
}

StreamHandle CudaPlatform::create_stream() {
  use_device();
  cudaStream_t stream = nullptr;
  // Non-blocking: grove's streams never serialize with the legacy default stream.
  GROVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                   "creating a stream on ", where());
  std::lock_guard<std::mutex> lock(mutex_);
  streams_[stream] = true;
  return StreamHandle{stream};
}

StreamHandle CudaPlatform::create_legacy_ordered_stream() {
  use_device();
  cudaStream_t stream = nullptr;
  // Blocking (cudaStreamDefault): CUDA orders it with the legacy default
  // stream both ways (Note [Calls from the legacy default stream], capi/grove.cc).
  GROVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault),
                   "creating a stream ordered with the legacy default stream on ", where());
  std::lock_guard<std::mutex> lock(mutex_);
  streams_[stream] = true;
  return StreamHandle{stream};
}

void CudaPlatform::destroy_stream(StreamHandle stream) {
  GROVE_CHECK(!stream.is_default(), where(), ": destroy_stream of the legacy default stream");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GROVE_CHECK(captures_.count(cuda_stream(stream)) == 0, where(),
                ": cannot destroy a stream while it is capturing; end the capture first");
    streams_.erase(cuda_stream(stream));
  }
  use_device();
  // Note [cuBLAS state of destroyed streams] (blas.h): the stream's GEMMs must
  // have finished before another stream takes over their workspace.
  GROVE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)),
                   "finishing a stream's work before destroying it on ", where());
  recycle_gemm_state(device(), stream);
  GROVE_CUDA_CHECK(cudaStreamDestroy(cuda_stream(stream)), "destroying a stream on ", where());
}

void CudaPlatform::synchronize_stream(StreamHandle stream) {
  if (stream.is_default()) {
    forbid_legacy_stream_during_capture("synchronizing the legacy default stream");
  }
  use_device();
  check_unsafe_call(cudaStreamSynchronize(cuda_stream(stream)), "cudaStreamSynchronize",
                    str_cat("synchronizing a stream on ", where()));
}

void CudaPlatform::synchronize_device() {
  use_device();
  if (active_captures_.load() > 0 && !captures_forbid_this_thread()) {
    synchronize_streams_outside_capture();
    return;
  }
  check_unsafe_call(cudaDeviceSynchronize(), "cudaDeviceSynchronize",
                    str_cat("synchronizing ", where()));
}

bool CudaPlatform::captures_forbid_this_thread() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [stream, capture] : captures_) {
    if (capture.mode == CaptureMode::kGlobal || (capture.mode == CaptureMode::kThreadLocal &&
                                                 capture.thread == std::this_thread::get_id())) {
      return true;
    }
  }
  return false;
}

// Note [Unsafe calls during capture], case (3).
void CudaPlatform::synchronize_streams_outside_capture() {
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [stream, alive] : streams_) streams.push_back(stream);
    if (upload_stream_ != nullptr) streams.push_back(upload_stream_);
  }
  streams.push_back(nullptr);  // the legacy default stream
  for (cudaStream_t stream : streams) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    GROVE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status), "checking whether a stream of ",
                     where(), " captures");
    if (status != cudaStreamCaptureStatusNone) continue;
    GROVE_CUDA_CHECK(cudaStreamSynchronize(stream), "synchronizing a stream of ", where(),
                     " while another thread captures");
  }
}

EventHandle CudaPlatform::create_event(bool enable_timing) {
  use_device();
  cudaEvent_t event = nullptr;
  GROVE_CUDA_CHECK(
      cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming),
      "creating an event on ", where());
  return EventHandle{event};
}

void CudaPlatform::destroy_event(EventHandle event) {
  use_device();
  GROVE_CUDA_CHECK(cudaEventDestroy(cuda_event(event)), "destroying an event on ", where());
}

void CudaPlatform::record_event(EventHandle event, StreamHandle stream) {
  if (stream.is_default()) {
    forbid_legacy_stream_during_capture("recording an event on the legacy default stream");
  }
  use_device();
  GROVE_CUDA_CHECK(cudaEventRecord(cuda_event(event), cuda_stream(stream)),
                   "recording an event on a stream of ", where());
}

void CudaPlatform::stream_wait_event(StreamHandle stream, EventHandle event) {
  use_device();
  GROVE_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), cuda_event(event), 0),
                   "making a stream of ", where(), " wait on an event");
}

void CudaPlatform::synchronize_event(EventHandle event) {
  use_device();
  check_unsafe_call(cudaEventSynchronize(cuda_event(event)), "cudaEventSynchronize",
                    str_cat("waiting for an event on ", where()));
}

float CudaPlatform::elapsed_ms(EventHandle start, EventHandle end) {
  use_device();
  float milliseconds = 0;
  GROVE_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, cuda_event(start), cuda_event(end)),
                   "measuring the time between two events on ", where(),
                   " (both need timing enabled and must have completed)");
  return milliseconds;
}

KernelHandle CudaPlatform::load_kernel(const KernelSource& source) {
  GROVE_CHECK_AS(DeviceError, !source.ptx.empty() || !source.image.empty(), where(), ": kernel '",
                 source.name,
                 "' has neither PTX nor a cubin/fatbin image; the cuda device runs only those");
  use_device();
  const bool programmatic = programmatic_launch_ && !source.ptx_programmatic.empty();
  const std::string& whole = programmatic         ? source.ptx_programmatic
                             : source.ptx.empty() ? source.image
                                                  : source.ptx;
  // Note [One entry of a PTX module] (ptx_entries.cc).
  std::optional<std::string> one_entry;
  if (!source.ptx.empty() && !source.whole_module && one_entry_per_module_enabled()) {
    one_entry = ptx_with_only_entry(whole, source.name);
  }
  const std::string& code = one_entry ? *one_entry : whole;
  const int load_threads = kernel_load_threads();
  // A background load looks the kernel up later (Note [Kernels loaded in the
  // background]), so a name the PTX does not define is reported here.
  GROVE_CHECK_AS(DeviceError,
                 load_threads == 0 || source.ptx.empty() ||
                     code.find(str_cat(".entry ", source.name)) != std::string::npos,
                 "looking up kernel '", source.name, "' in its PTX on ", where(),
                 ": the PTX defines no .entry of that name (is it declared extern \"C\"?)");
  std::lock_guard<std::mutex> lock(mutex_);
  auto library_it = libraries_.find(code);
  if (library_it == libraries_.end()) {
    library_it = libraries_.emplace(code, std::shared_future<cudaLibrary_t>{}).first;
    const std::string what = str_cat("the PTX of kernel '", source.name, "' on ", where());
    try {
      library_it->second = loader_->load(library_it->first, source.name, what, load_threads);
    } catch (...) {
      libraries_.erase(library_it);
      throw;
    }
  }
  auto key = std::make_pair(&library_it->first, source.name);
  if (auto it = kernels_by_name_.find(key); it != kernels_by_name_.end()) {
    return KernelHandle{it->second};
  }
  CudaKernel& kernel = kernels_.emplace_back();
  kernel.name = source.name;
  kernel.device = index_;
  kernel.programmatic = programmatic;
  kernel.max_dynamic_shared_bytes = source.max_dynamic_shared_bytes;
  kernel.library = library_it->second;
  if (load_threads == 0) {
    try {
      kernel.get();  // the old path: loaded and looked up before load_kernel returns
    } catch (...) {
      kernels_.pop_back();
      if (library_it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        try {
          library_it->second.get();
        } catch (...) {
          libraries_.erase(library_it);  // a failed JIT is not kept
        }
      }
      throw;
    }
  }
  kernels_by_name_.emplace(key, &kernel);
  if (load_threads > 0) pending_kernels_.push_back(&kernel);
  return KernelHandle{&kernel};
}

// Each kernel is waited for by one wait: a failed JIT throws there once (and
// at each launch of that kernel), not in every later compile of the process.
void CudaPlatform::wait_for_kernel_loads() {
  std::vector<const CudaKernel*> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(pending_kernels_);
  }
  std::exception_ptr first_error;
  for (const CudaKernel* kernel : pending) {
    try {
      kernel->get();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

// Note [Programmatic dependent launch]
// In a graph a kernel node starts only once the node before it has ended and
// its writes are flushed, so each of a batch-1 decode step's ~85 kernels paid
// its launch and its grid's ramp while the SMs sat idle after the previous one
// (1.5-3 us each on an H100, for kernels of 3-20 us). A kernel whose
// KernelSource has ptx_programmatic is loaded from it on devices of compute
// capability 9.0+ and launched with cudaLaunchAttributeProgrammaticStreamSerialization:
// its blocks may start once every block of the kernel before it has called
// griddepcontrol.launch_dependents (or ended), and each thread calls
// griddepcontrol.wait, which returns once that kernel has completed and its
// writes are visible (runtime/programmatic_launch_device.h). Captured, such a
// launch is a programmatic edge of the graph. What grove's programmatic kernels
// keep to: (1) before its wait a kernel writes no memory and reads only memory
// that the kernel right before it does not write (read-only weights; a cache
// written steps before: Note [Decode attention loads the cache early]), or
// prefetches into L2, which changes no value;
// (2) it allows the next kernel only after its own wait, so when a kernel's
// part before the wait runs, every kernel but the one right before it has
// completed (except after the streamed GEMVs, which read only weights before
// their wait and allow the next kernel first: Note [Streamed GEMV allows the
// next kernel first], runtime/cuda/small_m_gemv.h). Kernels without
// programmatic PTX (generated kernels, cuBLAS) are
// launched as before and wait for full completion; a programmatic kernel after
// one of them starts when it ends. Results are the same bits either way;
// GROVE_PROGRAMMATIC_LAUNCH=0 loads the plain PTX (for comparisons). A WHILE
// body accepts programmatic edges on CUDA 13 (else it would get default ones:
// Note [WHILE bodies without programmatic edges]).
// H100, session 17 round 1, decode benchmark at batch 1 in one call (base ->
// programmatic): the 1B step 1274.3 -> 1244.4 us per-step graphs and 1309.6 ->
// 1246.0 in the WHILE loop; the small config 109.9 -> 100.0 and 111.7 -> 101.8.
// Not kept: allowing the next kernel first thing (before the wait; the probe
// runtime/cuda/probes/gemv_pdl_probe.cu had its 16-layer GEMV step at 1045 against
// 1060 us) together with splitting the 1B down projection's K over 4 warps (20.0
// -> 15.9 us per call alone in the probe) made the 1B step 1304.4 us (round 2,
// its base again 1274.4): which of the two cost it was not measured.
// Tests: CudaPlatformTest.ProgrammaticGemvChainMatchesTheHostAndLeavesProgrammaticEdges
// (tests/runtime/cuda_platform_test.cc); DecodeLoopTest on cuda (WHILE loop, per-step graphs and
// the Generator give the same tokens).
void CudaPlatform::launch_kernel(KernelHandle kernel, const LaunchDims& dims,
                                 const KernelArgs& args, StreamHandle stream) {
  GROVE_CHECK_AS(DeviceError, kernel.impl != nullptr, where(), ": launch of a null kernel");
  const auto* cuda_kernel = static_cast<const CudaKernel*>(kernel.impl);
  if (stream.is_default()) [[unlikely]] {
    forbid_legacy_stream_during_capture("work on the legacy default stream");
  }
  use_device();
  // cudaLaunchKernel reads each parameter through a pointer to its value; a
  // KernelArgs slot holds a parameter in its low bytes (little-endian).
  std::array<void*, kMaxInlineSlots> inline_params;
  std::vector<void*> heap_params;
  void** params = inline_params.data();
  if (args.slots.size() > kMaxInlineSlots) {
    heap_params.resize(args.slots.size());
    params = heap_params.data();
  }
  for (size_t i = 0; i < args.slots.size(); ++i) {
    params[i] = const_cast<uint64_t*>(&args.slots[i]);
  }
  cudaStream_t cuda_stream_handle = cuda_stream(stream);
  // Note [Programmatic dependent launch]: a kernel loaded from its programmatic PTX waits
  // for its predecessors itself (griddepcontrol.wait), so it may be started before they end;
  // captured, the launch becomes a programmatic edge of the graph.
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(dims.grid.x, dims.grid.y, dims.grid.z);
  config.blockDim = dim3(dims.block.x, dims.block.y, dims.block.z);
  config.dynamicSmemBytes = dims.shared_bytes;
  config.stream = cuda_stream_handle;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (cuda_kernel->programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  GROVE_CUDA_CHECK(
      cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(cuda_kernel->get()), params),
      "launching kernel '", cuda_kernel->name, "' with ", dims_str(dims),
      cuda_kernel->programmatic ? " (programmatic dependent launch)" : "", " on ", where());
  if (active_captures_.load(std::memory_order_relaxed) > 0) {
    record_captured_launch(cuda_stream_handle, cuda_kernel, dims, args);
  }
}

// Note [Kernel arguments of captured nodes]: CUDA does not say how many bytes
// of parameters a captured kernel node has, so grove cannot read a node's
// KernelArgs back from the graph. Instead, right after a launch into a capture,
// the capture's dependency set is exactly the node just added; grove files that
// node with its kernel and slots under the capture's id, and end_capture hands
// the table to the graph. Nodes not in the table were launched by libraries
// (cuBLAS) and are reported with launched_by_grove = false.
void CudaPlatform::record_captured_launch(cudaStream_t stream, const CudaKernel* kernel,
                                          const LaunchDims& dims, const KernelArgs& args) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaGraphNode_t* dependencies = nullptr;
  size_t dependency_count = 0;
  GROVE_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id, nullptr, &dependencies, nullptr,
                                            &dependency_count),
                   "finding the graph node of kernel '", kernel->name, "' during capture on ",
                   where());
  if (status != cudaStreamCaptureStatusActive || dependency_count != 1) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = capture_launches_.find(id);
  if (it == capture_launches_.end()) return;  // a capture grove did not begin
  it->second[dependencies[0]] = LaunchRecord{kernel, dims, args};
}

void CudaPlatform::launch_host_function(StreamHandle stream, void (*function)(void*),
                                        void* user_data) {
  if (stream.is_default()) {
    forbid_legacy_stream_during_capture("a host function on the legacy default stream");
  }
  use_device();
  GROVE_CUDA_CHECK(cudaLaunchHostFunc(cuda_stream(stream), function, user_data),
                   "enqueueing a host function on a stream of ", where());
}

void CudaPlatform::begin_capture(StreamHandle stream, CaptureMode mode) {
  GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                 "cannot capture on the legacy default stream: create a stream with "
                 "create_stream() and capture on it");
  cudaStream_t s = cuda_stream(stream);
  use_device();
  GROVE_CUDA_CHECK(cudaStreamBeginCapture(s, cuda_capture_mode(mode)),
                   "beginning stream capture on ", where());
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  GROVE_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id),
                   "reading the id of the capture "
                   "just begun on ",
                   where());
  std::lock_guard<std::mutex> lock(mutex_);
  captures_[s] = ActiveCapture{id, mode, std::this_thread::get_id()};
  capture_launches_[id];
  invalidated_by_grove_.erase(s);
  active_captures_.fetch_add(1);
}

GraphHandle CudaPlatform::end_capture(StreamHandle stream) {
  cudaStream_t s = cuda_stream(stream);
  LaunchTable launches;
  std::string grove_reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = captures_.find(s);
    GROVE_CHECK_AS(CaptureViolation, it != captures_.end(), where(),
                   ": end_capture on a stream that is not capturing (or whose capture was begun "
                   "on another stream: end it there)");
    auto table = capture_launches_.find(it->second.id);
    launches = std::move(table->second);
    capture_launches_.erase(table);
    captures_.erase(it);
    if (auto reason = invalidated_by_grove_.find(s); reason != invalidated_by_grove_.end()) {
      grove_reason = reason->second;
      invalidated_by_grove_.erase(reason);
    }
    active_captures_.fetch_sub(1);
  }
  use_device();
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(s, &graph);
  if (status != cudaSuccess || !grove_reason.empty()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    std::string doing = str_cat("ending stream capture on ", where());
    if (!grove_reason.empty()) doing += str_cat(" (grove invalidated it: ", grove_reason, ")");
    if (status == cudaSuccess) {
      throw CaptureViolation(
          str_cat("stream capture on ", where(), " was invalidated: ", grove_reason));
    }
    throw_cuda_error(status, "cudaStreamEndCapture", doing);
  }
  auto* result = new CudaGraph();
  result->graph = graph;
  result->launches = std::move(launches);
  return GraphHandle{result};
}

CaptureStatus CudaPlatform::capture_status(StreamHandle stream) {
  use_device();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  GROVE_CUDA_CHECK(cudaStreamIsCapturing(cuda_stream(stream), &status),
                   "querying the capture status of a stream on ", where());
  switch (status) {
    case cudaStreamCaptureStatusNone:
      return CaptureStatus::kNone;
    case cudaStreamCaptureStatusInvalidated:
      return CaptureStatus::kInvalidated;
    case cudaStreamCaptureStatusActive:
      break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return invalidated_by_grove_.count(cuda_stream(stream)) != 0 ? CaptureStatus::kInvalidated
                                                               : CaptureStatus::kActive;
}

// Note [Unsafe calls during capture]: CUDA itself rejects most calls a capture
// forbids (cudaErrorStreamCaptureUnsupported and friends become
// CaptureViolation with CUDA's message). Two cases need grove's help to match
// the sim platform: (1) work on the legacy default stream does not touch a
// capture on grove's non-blocking streams, so CUDA accepts it, but grove
// forbids it, as sim does, under the same mode rules (global: any thread;
// thread-local: the capturing thread); (2) when an unsafe call such as
// cudaDeviceSynchronize fails because of a capture, grove also marks the
// captures that forbade it as invalidated, so end_capture reports the
// violation whichever thread made it; (3) cudaDeviceSynchronize would also
// synchronize a capturing stream and so invalidate another thread's
// thread-local or relaxed capture, which CUDA's mode rules mean to allow; while
// such a capture is active, grove synchronizes every stream it created that is
// not capturing (and the legacy default stream) instead.
int CudaPlatform::invalidate_forbidding_captures(const std::string& reason) {
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [stream, capture] : captures_) {
      bool forbids =
          capture.mode == CaptureMode::kGlobal || (capture.mode == CaptureMode::kThreadLocal &&
                                                   capture.thread == std::this_thread::get_id());
      if (forbids) {
        invalidated_by_grove_.emplace(stream, reason);
        streams.push_back(stream);
      }
    }
  }
  for (cudaStream_t stream : streams) {
    if (cudaStreamQuery(stream) != cudaSuccess) cudaGetLastError();
  }
  return static_cast<int>(streams.size());
}

void CudaPlatform::forbid_legacy_stream_during_capture(const char* what) {
  if (active_captures_.load(std::memory_order_relaxed) == 0) return;
  if (invalidate_forbidding_captures(what) == 0) return;
  throw CaptureViolation(str_cat(what, " is not allowed on ", where(),
                                 " while a stream capture is active; the capture is invalidated. "
                                 "Use a stream from create_stream()"));
}

void CudaPlatform::check_unsafe_call(cudaError_t status, const char* call,
                                     const std::string& doing) {
  if (status == cudaSuccess) [[likely]] {
    return;
  }
  if (is_capture_error(status) && active_captures_.load() > 0) {
    invalidate_forbidding_captures(str_cat(call, " during capture"));
  }
  throw_cuda_error(status, call, doing);
}

void CudaPlatform::invalidate_capture(StreamHandle stream) {
  cudaStream_t s = cuda_stream(stream);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (captures_.count(s) == 0) return;
    invalidated_by_grove_.emplace(s, "grove detected a capture violation");
  }
  // CUDA has no call that just invalidates a capture; querying a capturing
  // stream is forbidden and invalidates it, so later captured work fails the
  // way it would after any other violation. The expected error is discarded.
  use_device();
  if (cudaStreamQuery(s) != cudaSuccess) cudaGetLastError();
}

}  // namespace cuda_detail
}  // namespace grove::runtime
