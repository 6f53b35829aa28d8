// Platform is the one narrow interface between grove and a device: raw memory,
// copies, streams, events, kernels, stream capture, graphs and BLAS. `sim` and
// `cuda` implement it (`cpu` is the sim platform without capture); nothing
// above runtime/ ever sees a CUDA type. One Platform instance serves one device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace grove::runtime {

class BlasSupport;  // runtime/blas.h

// Opaque handles; what they point to belongs to the platform that made them.
// A null stream is the legacy default stream, which grove never uses for its
// own work (and on which capture is an error).
struct StreamHandle {
  void* impl = nullptr;
  bool is_default() const { return impl == nullptr; }
  friend bool operator==(StreamHandle, StreamHandle) = default;
};
struct EventHandle {
  void* impl = nullptr;
};
struct GraphHandle {
  void* impl = nullptr;
  explicit operator bool() const { return impl != nullptr; }
};
struct GraphExecHandle {
  void* impl = nullptr;
  explicit operator bool() const { return impl != nullptr; }
};
struct KernelHandle {
  void* impl = nullptr;
  explicit operator bool() const { return impl != nullptr; }
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

struct LaunchDims {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0;
};

// Kernel parameters as 8-byte slots in declaration order: a pointer or a
// 64-bit integer fills a slot; a 32-bit value sits in the slot's low bytes.
struct KernelArgs {
  std::vector<uint64_t> slots;

  KernelArgs& add_pointer(const void* pointer) {
    slots.push_back(reinterpret_cast<uint64_t>(pointer));
    return *this;
  }
  KernelArgs& add_i64(int64_t value) {
    slots.push_back(static_cast<uint64_t>(value));
    return *this;
  }
  KernelArgs& add_f32(float value);
  friend bool operator==(const KernelArgs&, const KernelArgs&) = default;
};

// A host kernel (sim and cpu): runs the whole launch grid on the calling
// thread. `args` points at KernelArgs::slots.
using HostKernelFn = void (*)(const LaunchDims* dims, const uint64_t* args);

// What a kernel is made from: PTX text for cuda, a host function for sim/cpu.
struct KernelSource {
  std::string name;
  std::string ptx;
  HostKernelFn host_function = nullptr;
  // A cubin or fatbin image for cuda, instead of PTX: for kernels linked with
  // a device library at build time (the WHILE condition kernel calls
  // cudaGraphSetConditional from libcudadevrt, which PTX loading cannot link).
  std::string image;
  // PTX of the same kernel for devices of compute capability 9.0 and newer, in
  // which every thread waits for the kernels before it (griddepcontrol.wait)
  // before it reads or writes anything they may touch. Where the device takes
  // it, cuda runs this PTX and launches the kernel with programmatic dependent
  // launch, so it starts while the kernel before it drains (Note
  // [Programmatic dependent launch], runtime/cuda/cuda_platform.cc).
  std::string ptx_programmatic;
  // Dynamic shared memory a launch may ask for beyond 48 KiB (cuda allows it
  // per kernel; 0: at most 48 KiB). sim ignores it.
  uint32_t max_dynamic_shared_bytes = 0;
  // cuda: JIT the PTX module whole, even where the kernel's entry alone would
  // do (Note [One entry of a PTX module], runtime/cuda/ptx_entries.cc): for a
  // caller that is about to load every entry of it.
  bool whole_module = false;
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Which threads a capture forbids unsafe calls on (CUDA's capture modes).
enum class CaptureMode { kGlobal, kThreadLocal, kRelaxed };

enum class CaptureStatus { kNone, kActive, kInvalidated };

struct InstantiateOptions {
  // Note [AutoFreeOnLaunch]: see runtime/cuda/cuda_graphs.cc.
  bool auto_free_on_launch = true;
  // Upload the executable graph to the device right after instantiation, on this stream.
  StreamHandle upload_stream;
};

struct ExecUpdateResult {
  bool updated = false;
  std::string reason;  // why not, when !updated
};

// A kernel node of a captured graph, as the graph's kernel-node index sees it.
struct KernelNodeInfo {
  size_t kernel_node_index = 0;  // position among the graph's kernel nodes
  std::string kernel_name;
  bool launched_by_grove = false;  // false for library kernels (cuBLAS)
  KernelArgs args;                 // meaningful only when launched_by_grove
};

class Platform {
 public:
  virtual ~Platform() = default;

  virtual Device device() const = 0;
  // A human-readable name: "sim", "NVIDIA H200", ...
  virtual std::string name() const = 0;

  // The device's free and total memory right now (cudaMemGetInfo on cuda; on
  // sim, GROVE_SIM_MEMORY_BYTES less what is allocated), for reports such as
  // the memory a server's graphs take (a free-memory delta). -1: not known.
  struct MemoryInfo {
    int64_t free_bytes = -1;
    int64_t total_bytes = -1;
  };
  virtual MemoryInfo memory_info() { return {}; }

  // The device's streaming multiprocessors (cuda), for kernels that size their
  // grid to the device (Note [Streamed GEMV]); 1 where there are none (sim).
  virtual int multiprocessor_count() const { return 1; }

  // Whether work queued on a stream may still be running when the call that
  // queued it returns: true on cuda and on sim with SimOptions::async (each
  // stream on a worker thread), false on the synchronous sim.
  virtual bool streams_asynchronous() const { return false; }

  // Raw device memory (the caching allocator's segments).
  virtual void* allocate_raw(size_t bytes) = 0;
  virtual void free_raw(void* pointer) = 0;
  // Page-locked host memory (cudaHostAlloc on cuda, plain memory on sim),
  // mapped for the device: kernels read and write it at the same address:
  // copies between it and the device are truly asynchronous. Not for use
  // during a capture.
  virtual void* allocate_host_pinned(size_t bytes) = 0;
  virtual void free_host_pinned(void* pointer) = 0;

  virtual void copy_async(void* destination, const void* source, size_t bytes, CopyKind kind,
                          StreamHandle stream) = 0;
  virtual void memset_async(void* destination, int byte_value, size_t bytes,
                            StreamHandle stream) = 0;

  virtual StreamHandle create_stream() = 0;
  // A stream ordered with the legacy default stream both ways with no event
  // (CUDA: a blocking stream): its work waits for what the legacy stream
  // queued before it, and the legacy stream's later work waits for it. Never
  // captured on. Note [Calls from the legacy default stream] (capi/grove.cc).
  // Released with destroy_stream.
  virtual StreamHandle create_legacy_ordered_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  virtual void synchronize_device() = 0;

  virtual EventHandle create_event(bool enable_timing) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  virtual void record_event(EventHandle event, StreamHandle stream) = 0;
  virtual void stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  virtual void synchronize_event(EventHandle event) = 0;
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;

  // Loads a kernel once; the handle stays valid for the platform's lifetime.
  virtual KernelHandle load_kernel(const KernelSource& source) = 0;
  // Returns once every kernel load_kernel returned is ready to launch, and
  // throws the error of a load that failed (cuda JITs PTX in the background:
  // Note [Kernels loaded in the background], runtime/cuda/kernel_loader.cc).
  virtual void wait_for_kernel_loads() {}
  virtual void launch_kernel(KernelHandle kernel, const LaunchDims& dims, const KernelArgs& args,
                             StreamHandle stream) = 0;
  // Runs `function(user_data)` in stream order (cudaLaunchHostFunc).
  virtual void launch_host_function(StreamHandle stream, void (*function)(void*),
                                    void* user_data) = 0;

  virtual void begin_capture(StreamHandle stream, CaptureMode mode) = 0;
  // Ends the capture and returns its graph; throws CaptureViolation when the
  // capture was invalidated (the stream leaves capture mode either way).
  virtual GraphHandle end_capture(StreamHandle stream) = 0;
  virtual CaptureStatus capture_status(StreamHandle stream) = 0;
  // Marks an active capture invalid after grove itself detected a violation.
  virtual void invalidate_capture(StreamHandle stream) = 0;

  virtual GraphExecHandle instantiate(GraphHandle graph, const InstantiateOptions& options) = 0;
  virtual void launch_graph(GraphExecHandle exec, StreamHandle stream) = 0;
  // Swaps the arguments of `exec` for those of `graph` when the topology matches.
  virtual ExecUpdateResult update_graph_exec(GraphExecHandle exec, GraphHandle graph) = 0;
  virtual std::vector<KernelNodeInfo> kernel_nodes(GraphHandle graph) = 0;
  // Changes one kernel node's arguments in `exec`; takes effect from its next launch.
  virtual void set_kernel_node_args(GraphExecHandle exec, GraphHandle graph,
                                    size_t kernel_node_index, const KernelArgs& args) = 0;
  // Adds a kernel node to a captured graph that is not instantiated yet,
  // ordered before every node the graph has (all of them run after it), and
  // returns its kernel-node index: the existing kernel nodes keep theirs.
  virtual size_t add_head_kernel_node(GraphHandle graph, KernelHandle kernel,
                                      const LaunchDims& dims, const KernelArgs& args) = 0;
  // Conditional WHILE nodes (Note [While graphs], runtime/while_graph.h).
  // An empty graph (not a capture) that a WHILE node can be added to.
  virtual GraphHandle create_graph();
  // A condition of `graph`, set to `initial` at every launch of a graph
  // instantiated from it; a kernel of the WHILE body sets it through the
  // value returned (a 64-bit kernel argument, while_condition_kernel()).
  virtual uint64_t create_while_condition(GraphHandle graph, bool initial);
  // Appends to `graph` a WHILE node over a copy of `body`: the body runs again
  // and again while the condition is set (checked before each run). `body` may
  // hold kernels, copies and memsets only, and stays the caller's.
  virtual void add_while_node(GraphHandle graph, uint64_t condition, GraphHandle body);
  virtual size_t graph_node_count(GraphHandle graph) = 0;
  // Edges of `graph` that are not plain completion edges: the programmatic
  // ones captured launches of programmatic kernels leave on cuda (Note
  // [Programmatic dependent launch]); sim has none.
  virtual size_t graph_programmatic_edge_count(GraphHandle) { return 0; }
  virtual std::string graph_dot(GraphHandle graph) = 0;
  virtual void destroy_graph(GraphHandle graph) = 0;
  virtual void destroy_graph_exec(GraphExecHandle exec) = 0;

  // The device's GEMMs (runtime/blas.h); lives as long as the platform.
  virtual BlasSupport& blas() = 0;

  // The caching allocator's blocks as it hands them out (`handed_out`: to a
  // caller, for use on `stream`; otherwise rebuilt by a checkpoint restore) and
  // takes them back. sim's stream hazard checker maps kernel arguments to
  // blocks and checks reuse with them (runtime/sim/hazard_checker.h); other
  // platforms ignore them. May throw where the checker throws.
  virtual void note_block_allocated(void* /*address*/, size_t /*bytes*/, StreamHandle /*stream*/,
                                    bool /*handed_out*/) {}
  virtual void note_block_freed(void* /*address*/) {}
};

// Whether one-row GEMVs on cuda run their streamed kernels (Note [Streamed
// GEMV], runtime/cuda/small_m_gemv.h): the BLAS GEMV (o and down projections)
// or the RMSNorm GEMVs. GROVE_STREAMED_GEMV=0 turns both off, =blas or =norm
// keeps only that one; read at each launch, so one process can time each.
enum class StreamedGemvs : uint8_t { kBlas, kNorm };
bool streamed_gemv_enabled(StreamedGemvs kernels);
// Whether the streamed GEMVs read weights under an evict-first L2 policy,
// unless GROVE_WEIGHTS_EVICT_FIRST is 0 (Note [Streamed GEMV]); read at each launch.
bool weights_evict_first();
// Whether a streamed GEMV of `columns` output columns takes its deeper slot
// ring (Note [Streamed GEMV slots], runtime/cuda/small_m_gemv.h):
// GROVE_STREAMED_GEMV_SLOTS=deep for all, =auto for all but those of more
// than 4096 columns (the LM head; the RMSNorm GEMVs pass 0), else none. Read
// at each launch.
bool streamed_gemv_deep_slots(int64_t columns);
// Whether a streamed GEMV of `columns` output columns copies A into shared memory
// once per block and folds from there (K <= 8192): GROVE_GEMV_A_SHARED=1 for all,
// =auto for all but those of more than 4096 columns (the LM head), else none (Note
// [Streamed GEMV holds A in shared memory], runtime/cuda/small_m_gemv.h). Read at each
// launch.
bool streamed_gemv_a_shared(int64_t columns);
// Blocks an SM of every streamed GEMV's grid: GROVE_STREAMED_GEMV_BLOCKS (1-4) or
// `default_blocks`. A column's sum is one warp's, in one order, whichever warp takes it, and
// every block of the RMSNorm GEMVs normalizes the row alike, so the grid changes no bits (Note
// [Streamed GEMV holds A in shared memory], runtime/cuda/small_m_gemv.h). Read at each launch.
int streamed_gemv_blocks_per_sm(int default_blocks);

}  // namespace grove::runtime
