#include "runtime/while_graph.h"

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/pooled_capture.h"

namespace grove::runtime {
namespace {

constexpr unsigned char kFatbin[] = {
#include "runtime/while_condition_kernel_fatbin.inc"
};

// Note [While graphs]: on sim the condition handle is the address of the flag.
void host_set_while_condition(const LaunchDims*, const uint64_t* args) {
  auto* condition = reinterpret_cast<uint32_t*>(args[0]);
  *condition = *reinterpret_cast<const int32_t*>(args[1]) != 0 ? 1 : 0;
}

void host_while_count_down(const LaunchDims*, const uint64_t* args) {
  auto* condition = reinterpret_cast<uint32_t*>(args[0]);
  auto* remaining = reinterpret_cast<int64_t*>(args[1]);
  *remaining -= 1;
  *condition = *remaining > 0 ? 1 : 0;
}

KernelHandle condition_kernel(Device device, const char* name, HostKernelFn host_function) {
  KernelSource source;
  source.name = name;
  if (device.is_cuda()) {
    source.image.assign(reinterpret_cast<const char*>(kFatbin), sizeof(kFatbin));
  } else {
    source.host_function = host_function;
  }
  return load_kernel_once(device, source);
}

void launch_one_thread(Device device, KernelHandle kernel, uint64_t condition, const void* pointer,
                       StreamHandle stream) {
  LaunchDims dims;
  KernelArgs args;
  args.add_i64(static_cast<int64_t>(condition)).add_pointer(pointer);
  device_context(device).platform().launch_kernel(kernel, dims, args, stream);
}

}  // namespace

WhileGraph::WhileGraph(Device device, bool initial)
    : device_(device),
      platform_(device_context(device).platform()),
      allocator_(device_context(device).allocator()) {
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(), "cannot record WHILE graphs on ",
                 device.str(), ": cpu work always runs eagerly");
  graph_ = platform_.create_graph();
  try {
    condition_ = platform_.create_while_condition(graph_, initial);
  } catch (...) {
    platform_.destroy_graph(graph_);
    throw;
  }
}

WhileGraph::~WhileGraph() {
  abort_capture();
  if (exec_) platform_.destroy_graph_exec(exec_);
  if (graph_) platform_.destroy_graph(graph_);
}

void WhileGraph::capture_body_begin(StreamHandle stream, PoolId pool) {
  GROVE_CHECK_AS(CaptureViolation, !stream.is_default(),
                 "a WHILE body must be captured on a non-default stream: create one with "
                 "DeviceContext::create_stream()");
  GROVE_CHECK(!capturing_ && !has_body_, "WhileGraph: the body is captured once");
  GROVE_CHECK(!pool.is_default(), "WhileGraph: the body needs a private pool (create_pool())");
  begin_pooled_capture(platform_, allocator_, stream, pool, CaptureMode::kThreadLocal);
  capture_stream_ = stream;
  capture_pool_ = pool;
  capturing_ = true;
}

void WhileGraph::capture_body_end() {
  GROVE_CHECK(capturing_, "WhileGraph: capture_body_end without capture_body_begin");
  capturing_ = false;
  GraphHandle body = end_pooled_capture(platform_, allocator_, capture_stream_, capture_pool_);
  try {
    body_nodes_ = platform_.graph_node_count(body);
    platform_.add_while_node(graph_, condition_, body);
  } catch (...) {
    platform_.destroy_graph(body);
    throw;
  }
  platform_.destroy_graph(body);
  has_body_ = true;
}

void WhileGraph::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  abort_pooled_capture(platform_, allocator_, capture_stream_, capture_pool_);
}

void WhileGraph::instantiate() {
  GROVE_CHECK(has_body_, "WhileGraph: instantiate before the body was captured");
  GROVE_CHECK(!exec_, "WhileGraph: instantiated twice");
  InstantiateOptions options;
  options.auto_free_on_launch = false;
  exec_ = platform_.instantiate(graph_, options);
}

void WhileGraph::launch(StreamHandle stream) {
  GROVE_CHECK(exec_, "WhileGraph: launch before instantiate()");
  platform_.launch_graph(exec_, stream);
}

void launch_set_while_condition(Device device, uint64_t condition, const int32_t* flag,
                                StreamHandle stream) {
  launch_one_thread(
      device, condition_kernel(device, "grove_set_while_condition", &host_set_while_condition),
      condition, flag, stream);
}

void launch_while_count_down(Device device, uint64_t condition, int64_t* remaining,
                             StreamHandle stream) {
  launch_one_thread(device,
                    condition_kernel(device, "grove_while_count_down", &host_while_count_down),
                    condition, remaining, stream);
}

}  // namespace grove::runtime
