#include "runtime/sim/sim_platform.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "runtime/blas.h"
#include "runtime/error.h"
#include "runtime/launch_clock.h"
#include "runtime/sim/host_blas.h"
#include "runtime/sim/sim_capture.h"
#include "runtime/sim/sim_graph.h"
#include "runtime/sim/stream_worker.h"

namespace grove::runtime {
namespace {

using sim::Capture;
using sim::CaptureRegistry;
using sim::HazardChecker;
using sim::HazardMode;
using sim::MemoryAccess;
using sim::SimEvent;
using sim::SimGraph;
using sim::SimGraphExec;
using sim::SimKernel;
using sim::SimNode;
using sim::SimStream;
using sim::StreamWorker;

// Note [Sim execution model]: work on a stream that is not capturing runs at
// once on the calling thread, which trivially respects stream order and event
// dependencies (or on the stream's worker: Note [Asynchronous sim streams]). Work on a capturing
// stream is appended to the capture's graph with the stream's last nodes as dependencies; events
// carry those frontiers across streams (fork/join), as in CUDA. Calls CUDA forbids during capture
// (synchronizing, host reads and writes of device memory, freeing device
// memory, using the legacy default stream) invalidate the capture and throw
// CaptureViolation; the stream stays usable and end_capture reports the
// invalidation. Whether a call is forbidden depends on the capture mode and
// the calling thread, like cudaStreamCaptureMode.
//
// Note [Asynchronous sim streams]: with SimOptions::async (GROVE_SIM_ASYNC=1)
// every stream (the legacy default one too) has a worker thread that runs its
// work in order while the host goes on, so a missing event or a block reused
// early can give a wrong answer, as on a GPU. An event record queues a marker;
// a wait on it queues a task that blocks the waiting stream's worker until the
// marker has run; host synchronization blocks until the work has run and
// rethrows the first exception a task threw. The rest follows CUDA: a copy
// from pageable host memory reads its source before the call returns, a copy
// into pageable host memory returns when done, pinned memory is truly
// asynchronous, and freeing memory waits for the device. The legacy default
// stream is one more stream: grove's cuda streams are non-blocking, so it does
// not wait for them (nor they for it). Captures are unchanged (captured work
// does not run); a graph launch runs a snapshot of its nodes on the worker.
// Tests: tests/runtime/sim_async_test.cc, and the tree manager tests run
// asynchronously with the hazard checker throwing (tests/cudagraph_trees,
// the *_async targets).

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

class SimPlatform final : public Platform {
 public:
  SimPlatform(Device device, SimOptions options)
      : device_(device),
        captures_(device),
        async_(options.async),
        memory_limit_(sim_memory_limit()),
        blas_(sim::make_host_blas(*this)) {
    if (async_) legacy_stream_.worker = std::make_shared<StreamWorker>();
    if (options.hazards != HazardMode::kOff) {
      checker_ = std::make_unique<HazardChecker>(options.hazards);
      checker_->stream_created(&legacy_stream_, /*legacy_default=*/true);
    }
  }

  ~SimPlatform() override {
    drain_all();
    events_.clear();
    streams_.clear();
    for (auto& [pointer, bytes] : allocations_) std::free(pointer);
  }

  bool is_async() const { return async_; }
  bool streams_asynchronous() const override { return async_; }
  HazardChecker* checker() { return checker_.get(); }

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
    captures_.forbid("freeing device memory");
    drain_all();  // cudaFree waits for the device
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(pointer);
    GROVE_CHECK(it != allocations_.end(), device_.str(), ": free_raw of ", pointer,
                ", which this device did not allocate");
    allocated_bytes_ -= it->second;
    allocations_.erase(it);
    std::free(pointer);
  }

  void* allocate_host_pinned(size_t bytes) override {
    captures_.forbid("allocating pinned host memory");
    void* pointer = std::aligned_alloc(256, std::max<size_t>((bytes + 255) / 256 * 256, 256));
    if (pointer == nullptr)
      throw OutOfMemoryError(
          str_cat(device_.str(), ": pinned host allocation of ", bytes, " bytes failed"));
    std::lock_guard<std::mutex> lock(mutex_);
    pinned_.emplace(static_cast<char*>(pointer), bytes);
    return pointer;
  }

  void free_host_pinned(void* pointer) override {
    drain_all();  // cudaFreeHost waits for the device
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pinned_.erase(static_cast<char*>(pointer));
    }
    std::free(pointer);
  }

  void copy_async(void* destination, const void* source, size_t bytes, CopyKind kind,
                  StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture != nullptr && kind != CopyKind::kDeviceToDevice) {
      captures_.violate(s.capture,
                        kind == CopyKind::kDeviceToHost
                            ? "reading device memory from the host during stream capture"
                            : "writing device memory from the host during stream capture");
    }
    SimNode node;
    node.kind = SimNode::Kind::kCopy;
    node.destination = destination;
    node.source = source;
    node.bytes = bytes;
    node.copy_kind = kind;
    if (s.capture != nullptr || s.worker == nullptr || kind == CopyKind::kDeviceToDevice) {
      submit(stream, std::move(node));
      if (s.capture == nullptr && kind == CopyKind::kDeviceToHost && !is_pinned(destination))
        host_saw_finish(s);
      return;
    }
    copy_with_host_async(s, std::move(node));
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
    auto stream = std::make_unique<SimStream>();
    if (async_) stream->worker = std::make_shared<StreamWorker>();
    if (checker_ != nullptr) checker_->stream_created(stream.get(), /*legacy_default=*/false);
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.push_back(std::move(stream));
    return StreamHandle{streams_.back().get()};
  }

  // The sim orders its streams with events only; nothing calls this on sim
  // (Note [Calls from the legacy default stream], capi/grove.cc: cuda only).
  StreamHandle create_legacy_ordered_stream() override {
    GROVE_CHECK_AS(DeviceError, false, device_.str(),
                   ": the sim has no stream ordered implicitly with its legacy default stream; "
                   "use create_stream() and order it with record_event / stream_wait_event");
    return {};
  }

  void destroy_stream(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const auto& s) { return s.get() == stream.impl; });
    GROVE_CHECK(it != streams_.end(), device_.str(), ": destroy of an unknown stream");
    GROVE_CHECK((*it)->capture == nullptr, device_.str(),
                ": cannot destroy a stream while it is capturing; end the capture first");
    if (checker_ != nullptr) checker_->stream_destroyed(it->get());
    streams_.erase(it);  // its worker runs what is queued (waits and events hold it)
  }

  void synchronize_stream(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    if (s.capture != nullptr) captures_.violate(s.capture, "synchronizing a capturing stream");
    if (stream.is_default()) captures_.forbid("synchronizing the legacy default stream");
    if (s.worker != nullptr) {
      s.worker->drain();
      rethrow_worker_error(*s.worker);
    }
    host_saw_finish(s);
  }

  void synchronize_device() override {
    captures_.forbid("synchronizing the device");
    drain_all();
    for (const std::shared_ptr<StreamWorker>& worker : workers()) rethrow_worker_error(*worker);
    if (checker_ != nullptr) checker_->device_synchronized();
  }

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
    if (checker_ != nullptr) checker_->event_destroyed(it->get());
    events_.erase(it);
  }

  void record_event(EventHandle event, StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (s.capture != nullptr) {
      captures_.check_usable(s.capture);
      e.capture = s.capture;
      e.frontier = s.frontier;
      return;
    }
    if (stream.is_default()) captures_.forbid("recording an event on the legacy default stream");
    e.capture = nullptr;
    e.frontier.clear();
    e.recorded = true;
    e.worker = s.worker;
    if (s.worker != nullptr) {
      e.ticket = s.worker->enqueue([time = e.time] { time->store(now_ns()); });
    } else {
      e.time->store(now_ns());
    }
    if (checker_ != nullptr) checker_->event_recorded(&e, &s);
  }

  void stream_wait_event(StreamHandle stream, EventHandle event) override {
    SimStream& s = stream_of(stream);
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (e.capture == nullptr) {
      if (s.capture == nullptr) wait_outside_capture(s, e);
      return;
    }
    Capture* capture = e.capture;
    captures_.check_usable(capture);
    if (s.capture == nullptr) {
      GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                     "the legacy default stream cannot join a capture");
      s.capture = capture;
      s.frontier = e.frontier;
      capture->streams.insert(&s);
      return;
    }
    if (s.capture != capture) {
      captures_.violate(s.capture, "waiting on an event of a different capture");
    }
    for (size_t node : e.frontier) {
      if (std::find(s.frontier.begin(), s.frontier.end(), node) == s.frontier.end()) {
        s.frontier.push_back(node);
      }
    }
  }

  void synchronize_event(EventHandle event) override {
    auto& e = *static_cast<SimEvent*>(event.impl);
    if (e.capture != nullptr)
      captures_.violate(e.capture, "synchronizing an event recorded during capture");
    if (e.worker != nullptr) {
      e.worker->wait_for(e.ticket);
      rethrow_worker_error(*e.worker);
    }
    if (checker_ != nullptr) checker_->event_synchronized(&e);
  }

  float elapsed_ms(EventHandle start, EventHandle end) override {
    auto& a = *static_cast<SimEvent*>(start.impl);
    auto& b = *static_cast<SimEvent*>(end.impl);
    GROVE_CHECK(a.timing && b.timing, "elapsed_ms needs events created with timing enabled");
    GROVE_CHECK(a.recorded && b.recorded, "elapsed_ms needs both events recorded outside capture");
    for (SimEvent* e : {&a, &b}) {
      if (e->worker != nullptr) e->worker->wait_for(e->ticket);
    }
    return static_cast<float>(b.time->load() - a.time->load()) / 1e6f;
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
    captures_.begin(s, mode);
  }

  GraphHandle end_capture(StreamHandle stream) override {
    SimStream& s = stream_of(stream);
    GROVE_CHECK_AS(CaptureViolation, s.capture != nullptr,
                   "end_capture on a stream that is not capturing");
    GROVE_CHECK_AS(CaptureViolation, s.capture->origin == &s,
                   "end_capture must be called on the stream that began the capture");
    std::unique_ptr<Capture> owned = captures_.end(s);
    forget_capture_events(owned.get());
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
    if (launch_clock::running()) [[unlikely]] {  // Note [The launch clock]
      const auto start = std::chrono::steady_clock::now();
      launch_graph_now(exec, stream);
      launch_clock::add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count());
      return;
    }
    launch_graph_now(exec, stream);
  }

  void launch_graph_now(GraphExecHandle exec, StreamHandle stream) {
    SimStream& s = stream_of(stream);
    GROVE_CHECK_AS(CaptureViolation, s.capture == nullptr,
                   "launching a graph into a capturing stream is not supported by grove");
    if (stream.is_default()) captures_.forbid("launching on the legacy default stream");
    const auto& e = *static_cast<SimGraphExec*>(exec.impl);
    if (checker_ != nullptr) {
      for (size_t index : e.order) {
        check_operation(s, e.nodes[index], str_cat(" (node ", index, " of a graph launch)"));
      }
    }
    if (s.worker == nullptr) {
      for (size_t index : e.order) e.nodes[index].run();
      return;
    }
    // A snapshot: the exec may be updated or destroyed before the launch runs.
    auto nodes = std::make_shared<std::vector<SimNode>>();
    nodes->reserve(e.order.size());
    for (size_t index : e.order) nodes->push_back(e.nodes[index]);
    s.worker->enqueue([nodes] {
      for (const SimNode& node : *nodes) node.run();
    });
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

  GraphHandle create_graph() override { return GraphHandle{new SimGraph()}; }

  uint64_t create_while_condition(GraphHandle graph, bool initial) override {
    GROVE_CHECK(graph.impl != nullptr, device_.str(), ": WHILE condition for a null graph");
    auto condition = std::make_shared<sim::SimCondition>();
    condition->initial = condition->value = initial ? 1 : 0;
    static_cast<SimGraph*>(graph.impl)->conditions.push_back(condition);
    return reinterpret_cast<uint64_t>(&condition->value);
  }

  void add_while_node(GraphHandle graph, uint64_t condition, GraphHandle body) override {
    GROVE_CHECK(graph.impl != nullptr && body.impl != nullptr, device_.str(),
                ": WHILE node with a null graph or body");
    auto& g = *static_cast<SimGraph*>(graph.impl);
    const auto& b = *static_cast<const SimGraph*>(body.impl);
    auto loop = std::make_shared<sim::SimWhileLoop>();
    for (const auto& made : g.conditions) {
      if (reinterpret_cast<uint64_t>(&made->value) == condition) loop->condition = made;
    }
    GROVE_CHECK(loop->condition != nullptr, device_.str(),
                ": WHILE node with a condition that was not made for this graph "
                "(create_while_condition(graph, ...))");
    for (const SimNode& node : b.nodes) {
      GROVE_CHECK(node.kind != SimNode::Kind::kHostFunction, device_.str(),
                  ": a WHILE body may not hold host functions (CUDA allows kernels, copies, "
                  "memsets and conditionals only)");
    }
    for (size_t index : sim::execution_order(b)) loop->body.push_back(b.nodes[index]);
    SimNode node;
    node.kind = SimNode::Kind::kWhile;
    node.loop = std::move(loop);
    if (!g.nodes.empty()) node.dependencies.push_back(g.nodes.size() - 1);
    g.nodes.push_back(std::move(node));
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

  void note_block_allocated(void* address, size_t bytes, StreamHandle stream,
                            bool handed_out) override {
    if (checker_ != nullptr)
      checker_->block_allocated(address, bytes, &stream_of(stream), handed_out);
  }

  void note_block_freed(void* address) override {
    if (checker_ != nullptr) checker_->block_freed(address);
  }

 private:
  SimStream& stream_of(StreamHandle stream) {
    return stream.is_default() ? legacy_stream_ : *static_cast<SimStream*>(stream.impl);
  }

  void submit(StreamHandle stream, SimNode node) {
    SimStream& s = stream_of(stream);
    if (s.capture == nullptr) {
      if (stream.is_default()) captures_.forbid("work on the legacy default stream");
      if (checker_ != nullptr) check_operation(s, node, "");
      if (s.worker != nullptr) {
        s.worker->enqueue([node = std::move(node)] { node.run(); });
        return;
      }
      node.run();
      return;
    }
    captures_.check_usable(s.capture);
    node.dependencies = s.frontier;
    s.capture->graph.nodes.push_back(std::move(node));
    s.frontier.assign(1, s.capture->graph.nodes.size() - 1);
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

  // The checker's view of a node about to run on `s`.
  void check_operation(SimStream& s, const SimNode& node, const std::string& suffix) {
    checker_->operation(&s, node.label() + suffix, sim::node_accesses(*checker_, node));
  }

  // An async copy with a host side on a stream with a worker: from pageable
  // memory the source is read now (CUDA stages it before returning); into
  // pageable memory the call returns when the copy has run.
  void copy_with_host_async(SimStream& s, SimNode node) {
    if (checker_ != nullptr) check_operation(s, node, "");
    if (node.copy_kind == CopyKind::kHostToDevice && !is_pinned(node.source)) {
      auto staged =
          std::make_shared<std::vector<char>>(static_cast<const char*>(node.source),
                                              static_cast<const char*>(node.source) + node.bytes);
      s.worker->enqueue([staged, destination = node.destination] {
        if (!staged->empty()) std::memcpy(destination, staged->data(), staged->size());
      });
      return;
    }
    bool pageable_destination =
        node.copy_kind == CopyKind::kDeviceToHost && !is_pinned(node.destination);
    uint64_t ticket = s.worker->enqueue([node = std::move(node)] { node.run(); });
    if (!pageable_destination) return;
    s.worker->wait_for(ticket);
    rethrow_worker_error(*s.worker);
    if (checker_ != nullptr) checker_->stream_synchronized(&s);
  }

  // A wait on an event recorded outside capture, by a stream not capturing.
  void wait_outside_capture(SimStream& s, const SimEvent& e) {
    if (checker_ != nullptr) checker_->stream_waited(&s, &e);
    if (e.worker == nullptr || e.worker == s.worker) return;  // ran already, or stream order
    s.worker->enqueue([worker = e.worker, ticket = e.ticket] { worker->wait_for(ticket); });
  }

  // The host has seen all of `s`'s work so far finish.
  void host_saw_finish(SimStream& s) {
    if (checker_ != nullptr) checker_->stream_synchronized(&s);
  }

  bool is_pinned(const void* pointer) {
    const char* byte = static_cast<const char*>(pointer);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pinned_.upper_bound(byte);
    if (it == pinned_.begin()) return false;
    --it;
    return byte < it->first + std::max<size_t>(it->second, 1);
  }

  std::vector<std::shared_ptr<StreamWorker>> workers() {
    std::vector<std::shared_ptr<StreamWorker>> result;
    if (legacy_stream_.worker != nullptr) result.push_back(legacy_stream_.worker);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& stream : streams_) {
      if (stream->worker != nullptr) result.push_back(stream->worker);
    }
    return result;
  }

  // Waits until every stream's queued work has run.
  void drain_all() {
    if (!async_) return;
    for (const std::shared_ptr<StreamWorker>& worker : workers()) worker->drain();
  }

  static void rethrow_worker_error(StreamWorker& worker) {
    if (std::exception_ptr error = worker.take_error()) std::rethrow_exception(error);
  }

  Device device_;
  CaptureRegistry captures_;
  bool async_;
  size_t memory_limit_;
  std::mutex mutex_;
  size_t allocated_bytes_ = 0;
  std::unordered_map<void*, size_t> allocations_;
  std::map<const char*, size_t> pinned_;  // pinned host allocations by address
  std::vector<std::unique_ptr<SimStream>> streams_;
  SimStream legacy_stream_;
  std::vector<std::unique_ptr<SimEvent>> events_;
  std::deque<SimKernel> kernels_;
  std::unique_ptr<BlasSupport> blas_;
  std::unique_ptr<HazardChecker> checker_;  // null when SimOptions::hazards is kOff
};

SimPlatform* as_sim(Platform& platform) { return dynamic_cast<SimPlatform*>(&platform); }

}  // namespace

std::unique_ptr<Platform> make_sim_platform(Device device) {
  return make_sim_platform(device, device.is_cpu() ? SimOptions{} : SimOptions::from_environment());
}

std::unique_ptr<Platform> make_sim_platform(Device device, SimOptions options) {
  GROVE_CHECK_AS(DeviceError, device.is_sim() || device.is_cpu(), "make_sim_platform(",
                 device.str(), "): only sim and cpu devices are emulated");
  return std::make_unique<SimPlatform>(device, options);
}

std::vector<sim::SimHazard> sim_hazards(Platform& platform) {
  SimPlatform* sim = as_sim(platform);
  if (sim == nullptr || sim->checker() == nullptr) return {};
  return sim->checker()->hazards();
}

void clear_sim_hazards(Platform& platform) {
  SimPlatform* sim = as_sim(platform);
  if (sim != nullptr && sim->checker() != nullptr) sim->checker()->clear_hazards();
}

bool sim_is_async(Platform& platform) {
  SimPlatform* sim = as_sim(platform);
  return sim != nullptr && sim->is_async();
}

}  // namespace grove::runtime
