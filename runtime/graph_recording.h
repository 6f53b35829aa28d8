// GraphRecording is one captured and instantiated graph on one device:
// capture_begin(stream, pool) ... capture_end(), instantiate(), replay(stream).
// During capture the calling thread's allocations are routed to `pool`, so the
// memory the graph writes stays reserved for it. update() re-captures the same
// work and swaps the new arguments into the executable graph when the topology
// allows, else instantiates afresh.
#pragma once

#include <string>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

class GraphRecording {
 public:
  explicit GraphRecording(Device device);
  ~GraphRecording();
  GraphRecording(const GraphRecording&) = delete;
  GraphRecording& operator=(const GraphRecording&) = delete;

  // Starts capturing `stream` in thread-local mode. Throws CaptureViolation for
  // the legacy default stream, with what to do instead.
  void capture_begin(StreamHandle stream, PoolId pool,
                     CaptureMode mode = CaptureMode::kThreadLocal);
  // Ends the capture. When the capture was invalidated, throws CaptureViolation
  // and leaves the recording empty and the stream usable.
  void capture_end();
  // Ends a capture after an exception in the captured code; never throws.
  void abort_capture() noexcept;
  bool capturing() const { return capturing_; }

  void instantiate(const InstantiateOptions& options = {});
  void replay(StreamHandle stream);

  // After a second capture_begin/capture_end of the same work: swaps the new
  // graph's arguments in (true), or re-instantiates (false, reason logged).
  bool update();

  // Between capture_end() and instantiate(): adds a kernel node that runs
  // before every captured node; returns its kernel-node index (the captured
  // nodes keep theirs). A recording with head kernels cannot update().
  size_t add_head_kernel(KernelHandle kernel, const LaunchDims& dims, const KernelArgs& args);
  std::vector<KernelNodeInfo> kernel_nodes() const;
  void set_kernel_node_args(size_t kernel_node_index, const KernelArgs& args);
  size_t node_count() const;
  std::string dot() const;

  bool instantiated() const { return static_cast<bool>(exec_); }
  Device device() const { return device_; }
  const std::string& last_update_reason() const { return last_update_reason_; }

 private:
  void reset_graphs() noexcept;

  Device device_;
  Platform& platform_;
  CachingAllocator& allocator_;
  StreamHandle capture_stream_;
  PoolId capture_pool_;
  bool capturing_ = false;
  GraphHandle graph_;          // the graph exec_ was made from
  GraphHandle pending_graph_;  // a re-capture waiting for update()
  GraphExecHandle exec_;
  InstantiateOptions options_;
  size_t head_kernels_ = 0;
  std::string last_update_reason_;
};

}  // namespace grove::runtime
