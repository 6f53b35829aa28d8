#include "runtime/sim/sim_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "runtime/blas.h"
#include "runtime/error.h"
#include "runtime/sim/host_blas.h"
#include "runtime/sim/sim_graph.h"

namespace grove::runtime {
namespace {

using sim::SimGraph;
using sim::SimGraphExec;
using sim::SimKernel;
using sim::SimNode;

// Note [Sim execution model]: work on a stream that is not capturing runs at
// once on the calling thread, which trivially respects stream order and event
// dependencies. Work on a capturing stream is appended to the capture's graph
// with the stream's last nodes as dependencies; events carry those frontiers
// across streams (fork/join), as in CUDA. Calls CUDA forbids during capture
// (synchronizing, host reads and writes of device memory, freeing device
// memory, using the legacy default stream) invalidate the capture and throw
// CaptureViolation; the stream stays usable and end_capture reports the
// invalidation. Whether a call is forbidden depends on the capture mode and
// the calling thread, like cudaStreamCaptureMode.

struct SimStream;

struct Capture {
  SimGraph graph;
  CaptureMode mode = CaptureMode::kGlobal;
  std::thread::id thread;
  bool invalidated = false;
  std::string reason;
  SimStream* origin = nullptr;
  std::set<SimStream*> streams;  // origin and every stream that joined
};

struct SimStream {
  Capture* capture = nullptr;
  std::vector<size_t> frontier;  // last captured nodes of this stream
};

struct SimEvent {
  bool timing = false;
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
  Capture* capture = nullptr;  // set when recorded on a capturing stream
  std::vector<size_t> frontier;
};

constexpr size_t kDefaultSimMemory = size_t{16} << 30;

size_t sim_memory_limit() {
  const char* value = std::getenv("GROVE_SIM_MEMORY_BYTES");
  if (value == nullptr) return kDefaultSimMemory;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0' && parsed > 0,
                 "GROVE_SIM_MEMORY_BYTES='", value, "': expected a positive number of bytes");
  return static_cast<size_t>(parsed);
}

class SimBackend final : public Backend {
 public:
  explicit SimBackend(Device device)
      : device_(device), memory_limit_(sim_memory_limit()), blas_(sim::make_host_blas(*this)) {}

  ~SimBackend() override {
    for (auto& [pointer, bytes] : allocations_) std::free(pointer);
  }

  Device device() const override { return device_; }
  std::string name() const override { return device_.is_cpu() ? "cpu" : "sim"; }

  MemoryInfo memory_info() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(memory_limit_ - std::min(memory_limit_, allocated_bytes_)),
            static_cast<int64_t>(memory_limit_)};
  }

  void* allocate_raw(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > memory_limit_ - std::min(memory_limit_, allocated_bytes_)) {
      throw OutOfMemoryError(str_cat(device_.str(), ": cannot allocate ", bytes, " bytes (",
                                     allocated_bytes_, " of ", memory_limit_, " in use)"));
    }
    void* pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (pointer == nullptr)
      throw OutOfMemoryError(
          str_cat(device_.str(), ": host allocation of ", bytes, " bytes failed"));
    allocations_.emplace(pointer, bytes);
    allocated_bytes_ += bytes;
    return pointer;
  }

  void free_raw(void* pointer) override {
    forbid_during_capture("freeing device memory");
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(pointer);
    GROVE_CHECK(it != allocations_.end(), device_.str(), ": free_raw of ", pointer,
                ", which this device did not allocate");
    allocated_bytes_ -= it->second;
    allocations_.erase(it);
    std::free(pointer);
  }

  void* allocate_host_pinned(size_t bytes) override {
    forbid_during_capture("allocating pinned host memory");
    void* pointer = std::aligned_alloc(256, std::max<size_t>((bytes + 255) / 256 * 256, 256));
    if (pointer == nullptr)
      throw OutOfMemoryError(
          str_cat(device_.str(), ": pinned host allocation of ", bytes, " bytes failed"));
    return pointer;
  }

  void free_host_pinned(void* pointer) override { std::free(pointer); }

  void copy_async(void* destination, const void* source, size_t bytes, CopyKind kind,
                  StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture != nullptr && kind != CopyKind::kDeviceToDevice) {
      violate(s.capture, kind == CopyKind::kDeviceToHost
                             ? "reading device memory from the host during stream capture"
                             : "writing device memory from the host during stream capture");
    }
    SimNode node;
    node.kind = SimNode::Kind::kCopy;
    node.destination = destination;
    node.source = source;
    node.bytes = bytes;
    node.copy_kind = kind;
    submit(stream, std::move(node));
  }

  void memset_async(void* destination, int byte_value, size_t bytes, StreamHandle stream) override {
    SimNode node;
    node.kind = SimNode::Kind::kMemset;
    node.destination = destination;
    node.bytes = bytes;
    node.byte_value = byte_value;
    submit(stream, std::move(node));
  }

  StreamHandle create_stream() override {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.push_back(std::make_unique<SimStream>());
    return StreamHandle{streams_.back().get()};
  }

  void destroy_stream(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const auto& s) { return s.get() == stream.impl; });
    GROVE_CHECK(it != streams_.end(), device_.str(), ": destroy of an unknown stream");
    GROVE_CHECK((*it)->capture == nullptr, device_.str(),
                ": cannot destroy a stream while it is capturing; end the capture first");
    streams_.erase(it);
  }

  void synchronize_stream(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture != nullptr) violate(s.capture, "synchronizing a capturing stream");
    if (stream.is_default()) forbid_during_capture("synchronizing the legacy default stream");
  }

  void synchronize_device() override { forbid_during_capture("synchronizing the device"); }

  EventHandle create_event(bool enable_timing) override {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::make_unique<SimEvent>());
    events_.back()->timing = enable_timing;
    return EventHandle{events_.back().get()};
  }

  void destroy_event(EventHandle event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(events_.begin(), events_.end(),
                           [&](const auto& e) { return e.get() == event.impl; });
    GROVE_CHECK(it != events_.end(), device_.str(), ": destroy of an unknown event");
    events_.erase(it);
  }

  void record_event(EventHandle event, StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (s.capture != nullptr) {
      check_capture_usable(s.capture);
      e.capture = s.capture;
      e.frontier = s.frontier;
      return;
    }
    if (stream.is_default())
      forbid_during_capture("recording an event on the legacy default stream");
    e.capture = nullptr;
    e.frontier.clear();
    e.recorded = true;
    e.time = std::chrono::steady_clock::now();
  }

  void stream_wait_event(StreamHandle stream, EventHandle event) override {
    SimStream& s = stream_of(stream);
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (e.capture == nullptr) return;  // the work it marks has already run
    Capture* capture = e.capture;
    check_capture_usable(capture);
    if (s.capture == nullptr) {
      GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                     "the legacy default stream cannot join a capture");
      s.capture = capture;
      s.frontier = e.frontier;
      capture->streams.insert(&s);
      return;
    }
    if (s.capture != capture) {
      violate(s.capture, "waiting on an event of a different capture");
    }
    for (size_t node : e.frontier) {
      if (std::find(s.frontier.begin(), s.frontier.end(), node) == s.frontier.end()) {
        s.frontier.push_back(node);
      }
    }
  }

  void synchronize_event(EventHandle event) override {
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (e.capture != nullptr) violate(e.capture, "synchronizing an event recorded during capture");
  }

  float elapsed_ms(EventHandle start, EventHandle end) override {
    auto& a = *static_cast<SimEvent*>(start.impl);
    auto& b = *static_cast<SimEvent*>(end.impl);
    GROVE_CHECK(a.timing && b.timing, "elapsed_ms needs events created with timing enabled");
    GROVE_CHECK(a.recorded && b.recorded, "elapsed_ms needs both events recorded outside capture");
    return std::chrono::duration<float, std::milli>(b.time - a.time).count();
  }

  KernelHandle load_kernel(const KernelSource& source) override {
    GROVE_CHECK_AS(DeviceError, source.host_function != nullptr, device_.str(), ": kernel '",
                   source.name, "' has no host function; sim and cpu run host kernels only");
    std::lock_guard<std::mutex> lock(mutex_);
    kernels_.push_back(SimKernel{source.name, source.host_function});
    return KernelHandle{&kernels_.back()};
  }

  void launch_kernel(KernelHandle kernel, const LaunchDims& dims, const KernelArgs& args,
                     StreamHandle stream) override {
    GROVE_CHECK(kernel.impl != nullptr, device_.str(), ": launch of a null kernel");
    SimNode node;
    node.kind = SimNode::Kind::kKernel;
    node.kernel = static_cast<const SimKernel*>(kernel.impl);
    node.dims = dims;
    node.args = args;
    submit(stream, std::move(node));
  }

  BlasSupport& blas() override { return *blas_; }

  void launch_host_function(StreamHandle stream, void (*function)(void*),
                            void* user_data) override {
    SimNode node;
    node.kind = SimNode::Kind::kHostFunction;
    node.host_function = function;
    node.user_data = user_data;
    submit(stream, std::move(node));
  }

  void begin_capture(StreamHandle stream, CaptureMode mode) override {
    GROVE_CHECK_AS(DeviceError, !device_.is_cpu(),
                   "the cpu device cannot capture graphs: cpu work always runs eagerly");
    GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                   "cannot capture on the legacy default stream: create a stream with "
                   "create_stream() and capture on it");
    SimStream& s = stream_of(stream);
    GROVE_CHECK_AS(CaptureViolation, s.capture == nullptr,
                   "begin_capture on a stream that is already capturing");
    auto capture = std::make_unique<Capture>();
    capture->mode = mode;
    capture->thread = std::this_thread::get_id();
    capture->origin = &s;
    capture->streams.insert(&s);
    s.capture = capture.get();
    s.frontier.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    captures_.push_back(std::move(capture));
  }

  GraphHandle end_capture(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    GROVE_CHECK_AS(CaptureViolation, s.capture != nullptr,
                   "end_capture on a stream that is not capturing");
    Capture* capture = s.capture;
    GROVE_CHECK_AS(CaptureViolation, capture->origin == &s,
                   "end_capture must be called on the stream that began the capture");
    if (!capture->invalidated) {
      std::string unjoined = find_unjoined_stream(*capture);
      if (!unjoined.empty()) {
        capture->invalidated = true;
        capture->reason = unjoined;
      }
    }
    for (SimStream* member : capture->streams) {
      member->capture = nullptr;
      member->frontier.clear();
    }
    std::unique_ptr<Capture> owned = take_capture(capture);
    forget_capture_events(capture);
    if (owned->invalidated) {
      throw CaptureViolation(
          str_cat("stream capture on ", device_.str(), " was invalidated: ", owned->reason));
    }
    return GraphHandle{new SimGraph(std::move(owned->graph))};
  }

  CaptureStatus capture_status(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture == nullptr) return CaptureStatus::kNone;
    return s.capture->invalidated ? CaptureStatus::kInvalidated : CaptureStatus::kActive;
  }

  void invalidate_capture(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture != nullptr && !s.capture->invalidated) {
      s.capture->invalidated = true;
      s.capture->reason = "grove detected a capture violation";
    }
  }

  GraphExecHandle instantiate(GraphHandle graph, const InstantiateOptions&) override {
    auto* exec = new SimGraphExec();
    const auto& source = *static_cast<SimGraph*>(graph.impl);
    exec->nodes = source.nodes;
    exec->order = sim::execution_order(source);
    return GraphExecHandle{exec};
  }

  void launch_graph(GraphExecHandle exec, StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    GROVE_CHECK_AS(CaptureViolation, s.capture == nullptr,
                   "launching a graph into a capturing stream is not supported by grove");
    if (stream.is_default()) forbid_during_capture("launching on the legacy default stream");
    const auto& e = *static_cast<SimGraphExec*>(exec.impl);
    for (size_t index : e.order) e.nodes[index].run();
  }

  ExecUpdateResult update_graph_exec(GraphExecHandle exec, GraphHandle graph) override {
    auto& e = *static_cast<SimGraphExec*>(exec.impl);
    auto& g = *static_cast<SimGraph*>(graph.impl);
    ExecUpdateResult result = sim::check_same_topology(e, g);
    if (result.updated) e.nodes = g.nodes;
    return result;
  }

  std::vector<KernelNodeInfo> kernel_nodes(GraphHandle graph) override {
    std::vector<KernelNodeInfo> result;
    for (const SimNode& node : static_cast<SimGraph*>(graph.impl)->nodes) {
      if (node.kind != SimNode::Kind::kKernel) continue;
      result.push_back(KernelNodeInfo{result.size(), node.kernel->name, true, node.args});
    }
    return result;
  }

  void set_kernel_node_args(GraphExecHandle exec, GraphHandle, size_t kernel_node_index,
                            const KernelArgs& args) override {
    size_t seen = 0;
    for (SimNode& node : static_cast<SimGraphExec*>(exec.impl)->nodes) {
      if (node.kind != SimNode::Kind::kKernel) continue;
      if (seen++ == kernel_node_index) {
        GROVE_CHECK(node.args.slots.size() == args.slots.size(), "set_kernel_node_args: kernel ",
                    node.kernel->name, " takes ", node.args.slots.size(), " argument slots, got ",
                    args.slots.size());
        node.args = args;
        return;
      }
    }
    throw Error(str_cat("set_kernel_node_args: the graph has no kernel node ", kernel_node_index));
  }

  size_t add_head_kernel_node(GraphHandle graph, KernelHandle kernel, const LaunchDims& dims,
                              const KernelArgs& args) override {
    GROVE_CHECK(kernel.impl != nullptr, device_.str(), ": head node of a null kernel");
    auto& g = *static_cast<SimGraph*>(graph.impl);
    size_t index = g.nodes.size();
    size_t kernel_index = 0;
    for (SimNode& node : g.nodes) {
      if (node.dependencies.empty()) node.dependencies.push_back(index);
      if (node.kind == SimNode::Kind::kKernel) ++kernel_index;
    }
    SimNode head;
    head.kind = SimNode::Kind::kKernel;
    head.kernel = static_cast<const SimKernel*>(kernel.impl);
    head.dims = dims;
    head.args = args;
    g.nodes.push_back(std::move(head));
    return kernel_index;
  }

  size_t graph_node_count(GraphHandle graph) override {
    return static_cast<SimGraph*>(graph.impl)->nodes.size();
  }

  std::string graph_dot(GraphHandle graph) override {
    return sim::graph_to_dot(*static_cast<SimGraph*>(graph.impl));
  }

  void destroy_graph(GraphHandle graph) override { delete static_cast<SimGraph*>(graph.impl); }

  void destroy_graph_exec(GraphExecHandle exec) override {
    delete static_cast<SimGraphExec*>(exec.impl);
  }

 private:
  SimStream& stream_of(StreamHandle stream) {
    return stream.is_default() ? legacy_stream_ : *static_cast<SimStream*>(stream.impl);
  }

  void submit(StreamHandle stream, SimNode node) {
    SimStream& s = stream_of(stream);
    if (s.capture == nullptr) {
      if (stream.is_default()) forbid_during_capture("work on the legacy default stream");
      node.run();
      return;
    }
    check_capture_usable(s.capture);
    node.dependencies = s.frontier;
    s.capture->graph.nodes.push_back(std::move(node));
    s.frontier.assign(1, s.capture->graph.nodes.size() - 1);
  }

  void check_capture_usable(Capture* capture) {
    GROVE_CHECK_AS(CaptureViolation, !capture->invalidated,
                   "work submitted to a stream whose capture was invalidated (", capture->reason,
                   "); end the capture to make the stream usable again");
  }

  [[noreturn]] void violate(Capture* capture, const std::string& what) {
    if (!capture->invalidated) {
      capture->invalidated = true;
      capture->reason = what;
    }
    throw CaptureViolation(str_cat(what, " is not allowed on ", device_.str(),
                                   " (CUDA would fail with cudaErrorStreamCaptureUnsupported); "
                                   "the capture is invalidated"));
  }

  // Unsafe calls are forbidden while a capture is active in global mode
  // anywhere, or in thread-local mode on the calling thread.
  void forbid_during_capture(const std::string& what) {
    Capture* forbidding = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& capture : captures_) {
        bool applies = capture->mode == CaptureMode::kGlobal ||
                       (capture->mode == CaptureMode::kThreadLocal &&
                        capture->thread == std::this_thread::get_id());
        if (applies && !capture->invalidated) {
          forbidding = capture.get();
          break;
        }
      }
    }
    if (forbidding != nullptr) violate(forbidding, what);
  }

  // A stream that joined a capture must have been joined back into the origin
  // stream (the origin waited on an event recorded after its last work).
  std::string find_unjoined_stream(const Capture& capture) {
    std::vector<bool> reachable(capture.graph.nodes.size(), false);
    std::vector<size_t> pending = capture.origin->frontier;
    while (!pending.empty()) {
      size_t node = pending.back();
      pending.pop_back();
      if (reachable[node]) continue;
      reachable[node] = true;
      for (size_t dependency : capture.graph.nodes[node].dependencies)
        pending.push_back(dependency);
    }
    for (SimStream* member : capture.streams) {
      for (size_t node : member->frontier) {
        if (!reachable[node]) {
          return "a stream that joined the capture was not joined back into the origin stream "
                 "before end_capture (record an event on it and wait on it from the origin)";
        }
      }
    }
    return "";
  }

  // Note [Events recorded during capture]: recording an event on a capturing
  // stream only marks a point of the graph (as in CUDA, where the event itself
  // is not recorded). Once the capture ends the event is back to its state
  // outside capture, so waiting on it later must not join a capture that no
  // longer exists.
  void forget_capture_events(const Capture* capture) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& event : events_) {
      if (event->capture == capture) {
        event->capture = nullptr;
        event->frontier.clear();
      }
    }
  }

  std::unique_ptr<Capture> take_capture(Capture* capture) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(captures_.begin(), captures_.end(),
                           [&](const auto& c) { return c.get() == capture; });
    std::unique_ptr<Capture> owned = std::move(*it);
    captures_.erase(it);
    return owned;
  }

  Device device_;
  size_t memory_limit_;
  std::mutex mutex_;
  size_t allocated_bytes_ = 0;
  std::unordered_map<void*, size_t> allocations_;
  std::vector<std::unique_ptr<SimStream>> streams_;
  SimStream legacy_stream_;
  std::vector<std::unique_ptr<SimEvent>> events_;
  std::deque<SimKernel> kernels_;
  std::vector<std::unique_ptr<Capture>> captures_;
  std::unique_ptr<BlasSupport> blas_;
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend(Device device) {
  GROVE_CHECK_AS(DeviceError, device.is_sim() || device.is_cpu(), "make_sim_backend(", device.str(),
                 "): only sim and cpu devices are emulated");
  return std::make_unique<SimBackend>(device);
}

}  // namespace grove::runtime
