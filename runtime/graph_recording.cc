#include "runtime/graph_recording.h"

#include <exception>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/pooled_capture.h"

namespace grove::runtime {

GraphRecording::GraphRecording(Device device)
    : device_(device),
      platform_(device_context(device).platform()),
      allocator_(device_context(device).allocator()) {
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(), "cannot record graphs on ", device.str(),
                 ": cpu work always runs eagerly");
}

GraphRecording::~GraphRecording() {
  abort_capture();
  reset_graphs();
}

void GraphRecording::reset_graphs() noexcept {
  if (exec_) platform_.destroy_graph_exec(exec_);
  if (graph_) platform_.destroy_graph(graph_);
  if (pending_graph_) platform_.destroy_graph(pending_graph_);
  exec_ = {};
  graph_ = {};
  pending_graph_ = {};
}

void GraphRecording::capture_begin(StreamHandle stream, PoolId pool, CaptureMode mode) {
  GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                 "graphs must be captured on a non-default stream: create one with "
                 "DeviceContext::create_stream() and make it current (StreamGuard)");
  GROVE_CHECK(!capturing_, "capture_begin while this recording is already capturing");
  GROVE_CHECK(!pool.is_default(),
              "capture_begin needs a private pool (create_pool()), not the "
              "default pool");
  begin_pooled_capture(platform_, allocator_, stream, pool, mode);
  capture_stream_ = stream;
  capture_pool_ = pool;
  capturing_ = true;
}

void GraphRecording::capture_end() {
  GROVE_CHECK(capturing_, "capture_end without capture_begin");
  capturing_ = false;
  GraphHandle graph = end_pooled_capture(platform_, allocator_, capture_stream_, capture_pool_);
  if (exec_) {
    if (pending_graph_) platform_.destroy_graph(pending_graph_);
    pending_graph_ = graph;
  } else {
    if (graph_) platform_.destroy_graph(graph_);
    graph_ = graph;
  }
}

void GraphRecording::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  abort_pooled_capture(platform_, allocator_, capture_stream_, capture_pool_);
}

void GraphRecording::instantiate(const InstantiateOptions& options) {
  GROVE_CHECK(graph_, "instantiate before a successful capture");
  GROVE_CHECK(!exec_, "instantiate called twice; use update() after re-capturing");
  options_ = options;
  exec_ = platform_.instantiate(graph_, options);
}

void GraphRecording::replay(StreamHandle stream) {
  GROVE_CHECK(exec_, "replay of a graph that was not instantiated");
  platform_.launch_graph(exec_, stream);
}

size_t GraphRecording::add_head_kernel(KernelHandle kernel, const LaunchDims& dims,
                                       const KernelArgs& args) {
  GROVE_CHECK(graph_ && !exec_ && !capturing_,
              "add_head_kernel needs a captured graph that is not instantiated yet");
  size_t index = platform_.add_head_kernel_node(graph_, kernel, dims, args);
  ++head_kernels_;
  return index;
}

bool GraphRecording::update() {
  GROVE_CHECK(exec_ && pending_graph_, "update() needs an instantiated graph and a re-capture");
  GROVE_CHECK(head_kernels_ == 0, "update() of a recording with ", head_kernels_,
              " head kernels: a re-capture would lose them; record afresh instead");
  ExecUpdateResult result = platform_.update_graph_exec(exec_, pending_graph_);
  if (result.updated) {
    platform_.destroy_graph(graph_);
    graph_ = pending_graph_;
    pending_graph_ = {};
    last_update_reason_.clear();
    return true;
  }
  last_update_reason_ = result.reason;
  log(LogLevel::kInfo, str_cat("graph exec update failed (", result.reason, "); re-instantiating"));
  platform_.destroy_graph_exec(exec_);
  platform_.destroy_graph(graph_);
  graph_ = pending_graph_;
  pending_graph_ = {};
  exec_ = platform_.instantiate(graph_, options_);
  return false;
}

std::vector<KernelNodeInfo> GraphRecording::kernel_nodes() const {
  GROVE_CHECK(graph_, "kernel_nodes of an empty recording");
  return platform_.kernel_nodes(graph_);
}

void GraphRecording::set_kernel_node_args(size_t kernel_node_index, const KernelArgs& args) {
  GROVE_CHECK(exec_, "set_kernel_node_args before instantiate");
  platform_.set_kernel_node_args(exec_, graph_, kernel_node_index, args);
}

size_t GraphRecording::node_count() const {
  GROVE_CHECK(graph_, "node_count of an empty recording");
  return platform_.graph_node_count(graph_);
}

std::string GraphRecording::dot() const {
  GROVE_CHECK(graph_, "dot of an empty recording");
  return platform_.graph_dot(graph_);
}

}  // namespace grove::runtime
