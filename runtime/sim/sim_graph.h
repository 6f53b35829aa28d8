// The graph a sim capture records: nodes in capture order, each with the
// nodes it depends on. Capture order is a valid execution order, so replay
// runs the nodes front to back with their recorded arguments.
#pragma once

#include <string>
#include <vector>

#include "runtime/backend.h"

namespace grove::runtime::sim {

struct SimKernel {
  std::string name;
  HostKernelFn function = nullptr;
};

struct SimNode {
  enum class Kind { kKernel, kCopy, kMemset, kHostFunction };
  Kind kind = Kind::kKernel;
  std::vector<size_t> dependencies;
  // kKernel
  const SimKernel* kernel = nullptr;
  LaunchDims dims;
  KernelArgs args;
  // kCopy and kMemset
  void* destination = nullptr;
  const void* source = nullptr;
  size_t bytes = 0;
  CopyKind copy_kind = CopyKind::kDeviceToDevice;
  int byte_value = 0;
  // kHostFunction
  void (*host_function)(void*) = nullptr;
  void* user_data = nullptr;

  void run() const;
  std::string label() const;
};

struct SimGraph {
  std::vector<SimNode> nodes;
};

struct SimGraphExec {
  std::vector<SimNode> nodes;
};

// Whether `graph` has the topology of `exec` (same nodes, kinds, kernels and
// edges), so that its arguments can be swapped in; the reason when not.
ExecUpdateResult check_same_topology(const SimGraphExec& exec, const SimGraph& graph);
std::string graph_to_dot(const SimGraph& graph);

}  // namespace grove::runtime::sim
