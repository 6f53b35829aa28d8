// WhileGraph is an executable graph made of one conditional WHILE node: its
// body (captured like any graph) runs again and again in one launch while a
// condition that the body's last kernel sets on the device stays true.
//
//   WhileGraph loop(device);
//   loop.capture_body_begin(stream, pool);
//   ... kernels of one iteration ...
//   launch_set_while_condition(device, loop.condition(), flag, stream);  // or a count-down
//   loop.capture_body_end();
//   loop.instantiate();
//   loop.launch(stream);  // iterations until the flag is 0
//
// Note [While graphs]
// The condition belongs to the outer graph and is reset to `initial` (true)
// at every launch; the body runs while it is non-zero, checked before each
// run, so a launch runs the body at least once. Only a kernel can change it
// (cudaGraphSetConditional on cuda; on sim the handle is the address of the
// emulated flag, which sim's host kernels write, and sim replays the body
// while it is set). CUDA allows kernels, copies, memsets and conditionals in
// a body (no host functions, no event nodes): sim refuses host functions too,
// so a body that records on sim records on cuda. The body is copied into the
// WHILE node, so its allocations (the capture pool's blocks) must stay
// reserved for this graph while it lives, as for any recording. Tests:
// WhileGraphTest.* (tests/runtime/while_graph_test.cc), DecodeLoopTest.* (tests/serving/llm).
#pragma once

#include <cstdint>

#include "runtime/caching_allocator.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

class WhileGraph {
 public:
  // Throws DeviceError for a device without graphs (cpu) or without WHILE nodes.
  explicit WhileGraph(Device device, bool initial = true);
  ~WhileGraph();
  WhileGraph(const WhileGraph&) = delete;
  WhileGraph& operator=(const WhileGraph&) = delete;

  // The handle the body's kernels pass to set the condition (a 64-bit argument).
  uint64_t condition() const { return condition_; }

  // Captures the body on `stream` (not the legacy default stream), its
  // allocations routed to private pool `pool`.
  void capture_body_begin(StreamHandle stream, PoolId pool);
  // Ends the capture and adds the WHILE node; throws CaptureViolation when the
  // capture was invalidated (the stream is usable afterwards).
  void capture_body_end();
  void abort_capture() noexcept;
  void instantiate();
  // Runs the loop on `stream`; asynchronous like any graph launch.
  void launch(StreamHandle stream);
  bool instantiated() const { return static_cast<bool>(exec_); }
  size_t body_node_count() const { return body_nodes_; }

 private:
  Device device_;
  Platform& platform_;
  CachingAllocator& allocator_;
  GraphHandle graph_;
  GraphExecHandle exec_;
  uint64_t condition_ = 0;
  StreamHandle capture_stream_;
  PoolId capture_pool_;
  bool capturing_ = false;
  bool has_body_ = false;
  size_t body_nodes_ = 0;
};

// Kernels that set a WHILE condition (PTX-free: a fatbin on cuda, host
// functions on sim), launched on `stream` with one thread.
// condition = (*flag != 0), flag an int32 in device memory.
void launch_set_while_condition(Device device, uint64_t condition, const int32_t* flag,
                                StreamHandle stream);
// --*remaining (an int64 in device memory); condition = (*remaining > 0).
void launch_while_count_down(Device device, uint64_t condition, int64_t* remaining,
                             StreamHandle stream);

}  // namespace grove::runtime
