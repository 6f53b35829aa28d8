#include "runtime/sim/sim_graph.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace grove::runtime::sim {

void SimNode::run() const {
  switch (kind) {
    case Kind::kKernel:
      kernel->function(&dims, args.slots.data());
      break;
    case Kind::kCopy:
      if (bytes > 0) std::memmove(destination, source, bytes);
      break;
    case Kind::kMemset:
      if (bytes > 0) std::memset(destination, byte_value, bytes);
      break;
    case Kind::kHostFunction:
      host_function(user_data);
      break;
    case Kind::kWhile:
      // Note [While graphs]: the launch resets the condition; the body sets it.
      loop->condition->value = loop->condition->initial;
      while (loop->condition->value != 0) {
        for (const SimNode& node : loop->body) node.run();
      }
      break;
  }
}

std::string SimNode::label() const {
  switch (kind) {
    case Kind::kKernel:
      return str_cat("kernel ", kernel->name, " grid=", dims.grid.x, "x", dims.grid.y, "x",
                     dims.grid.z, " block=", dims.block.x, "x", dims.block.y, "x", dims.block.z);
    case Kind::kCopy:
      return str_cat("memcpy ", bytes, " bytes");
    case Kind::kMemset:
      return str_cat("memset ", bytes, " bytes to ", byte_value);
    case Kind::kHostFunction:
      return "host function";
    case Kind::kWhile:
      return str_cat("while (", loop->body.size(), " body nodes)");
  }
  return "?";
}

std::vector<size_t> execution_order(const SimGraph& graph) {
  std::vector<size_t> order;
  order.reserve(graph.nodes.size());
  std::vector<uint8_t> state(graph.nodes.size(), 0);  // 0 new, 1 open, 2 placed
  std::vector<std::pair<size_t, size_t>> stack;       // (node, next dependency)
  for (size_t start = 0; start < graph.nodes.size(); ++start) {
    if (state[start] != 0) continue;
    stack.push_back({start, 0});
    state[start] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const std::vector<size_t>& dependencies = graph.nodes[node].dependencies;
      if (next < dependencies.size()) {
        size_t dependency = dependencies[next++];
        GROVE_CHECK(dependency < graph.nodes.size() && state[dependency] != 1, "sim graph: node ",
                    node, " has a cyclic or dangling dependency on node ", dependency);
        if (state[dependency] == 0) {
          state[dependency] = 1;
          stack.push_back({dependency, 0});
        }
        continue;
      }
      state[node] = 2;
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

ExecUpdateResult check_same_topology(const SimGraphExec& exec, const SimGraph& graph) {
  if (exec.nodes.size() != graph.nodes.size()) {
    return {false,
            str_cat("node count changed from ", exec.nodes.size(), " to ", graph.nodes.size())};
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const SimNode& before = exec.nodes[i];
    const SimNode& after = graph.nodes[i];
    if (before.kind != after.kind) return {false, str_cat("node ", i, " changed kind")};
    if (before.dependencies != after.dependencies) {
      return {false, str_cat("node ", i, " changed its dependencies")};
    }
    if (before.kind == SimNode::Kind::kKernel && before.kernel != after.kernel) {
      return {false, str_cat("node ", i, " changed kernel from ", before.kernel->name, " to ",
                             after.kernel->name)};
    }
    if (before.kind == SimNode::Kind::kWhile && before.loop != after.loop) {
      return {false, str_cat("node ", i, " is a different WHILE node")};
    }
    if (before.kind == SimNode::Kind::kHostFunction &&
        before.host_function != after.host_function) {
      return {false, str_cat("node ", i, " changed host function")};
    }
  }
  return {true, ""};
}

std::string graph_to_dot(const SimGraph& graph) {
  std::ostringstream dot;
  dot << "digraph sim_graph {\n";
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    dot << "  n" << i << " [label=\"" << i << ": " << graph.nodes[i].label() << "\"];\n";
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (size_t dependency : graph.nodes[i].dependencies) {
      dot << "  n" << dependency << " -> n" << i << ";\n";
    }
  }
  dot << "}\n";
  return dot.str();
}

}  // namespace grove::runtime::sim
