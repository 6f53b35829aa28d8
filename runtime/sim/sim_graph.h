// The graph a sim capture records: nodes in capture order, each with the
// nodes it depends on. Capture order is a valid execution order; a head node
// added after capture (Platform::add_head_kernel_node) is appended last and
// the roots depend on it, so replay runs the nodes in execution_order():
// every node after the nodes it depends on, otherwise in index order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/platform.h"

namespace grove::runtime::sim {

struct SimKernel {
  std::string name;
  HostKernelFn function = nullptr;
};

struct SimNode;

// A WHILE node's condition: the value a kernel sets through the handle
// (its address, Platform::create_while_condition) and the value each launch starts with.
struct SimCondition {
  uint32_t value = 0;
  uint32_t initial = 0;
};

// A WHILE node: `body` (a copy of the body graph's nodes in execution order)
// runs while `condition->value` is non-zero, checked before each run.
struct SimWhileLoop {
  std::shared_ptr<SimCondition> condition;
  std::vector<SimNode> body;
};

struct SimNode {
  enum class Kind { kKernel, kCopy, kMemset, kHostFunction, kWhile };
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
  // kWhile
  std::shared_ptr<const SimWhileLoop> loop;

  void run() const;
  std::string label() const;
};

struct SimGraph {
  std::vector<SimNode> nodes;
  // The conditions made for this graph's WHILE nodes (Platform::create_while_condition).
  std::vector<std::shared_ptr<SimCondition>> conditions;
};

struct SimGraphExec {
  std::vector<SimNode> nodes;
  std::vector<size_t> order;  // execution_order() of the graph it was made from
};

std::vector<size_t> execution_order(const SimGraph& graph);

// Whether `graph` has the topology of `exec` (same nodes, kinds, kernels and
// edges), so that its arguments can be swapped in; the reason when not.
ExecUpdateResult check_same_topology(const SimGraphExec& exec, const SimGraph& graph);
std::string graph_to_dot(const SimGraph& graph);

}  // namespace grove::runtime::sim
