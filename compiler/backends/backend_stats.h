// What an execution backend reports through the door (CompiledModel::
// backend_stats(), backend_memory()) as plain values. C++ callers read the
// fields; JSON text is made only where it leaves C++ (the C API, the CLI,
// benchmarks) by backend_stats_json.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/device.h"
#include "runtime/graph_tree_stats.h"

namespace grove::compiler::backends {

// One segment of a program a graph backend prepared.
struct SegmentStats {
  size_t index = 0;
  bool captured = false;
  std::string reason;    // why not captured (empty when captured)
  std::string category;  // stable key of the reason (empty when captured)
};

// One program a graph backend prepared.
struct ProgramStats {
  std::string model;
  std::string device;
  int64_t calls = 0;
  int64_t fallback_segments = 0;
  int64_t pool_mutation_fallbacks = 0;
  std::vector<SegmentStats> segments;
  // What one call runs, step by step (LoweredProgram::describe(): kernels by
  // spec name and iteration shape, library GEMMs by shape and epilogue).
  std::string lowered;
};

// What a backend knows about the programs it prepared: empty (backend "")
// for one that keeps nothing ("eager").
struct BackendStats {
  std::string backend;  // the backend's name, or "" when it keeps nothing
  std::vector<ProgramStats> programs;
  // The calling thread's tree of the device, once a program records segments.
  std::optional<runtime::GraphTreeStats> tree;
};

// The device memory a backend holds for its programs beyond their tensors (a
// graph backend's private pool); no device when it holds none.
struct BackendMemory {
  std::optional<runtime::Device> device;
  runtime::PoolStats pool;
};

}  // namespace grove::compiler::backends
