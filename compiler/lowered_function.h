// LoweredFunction is what the compiler hands to a backend and what the tree
// manager wraps: a callable that takes tensors, launches work on the current
// stream of their device (allocating outputs from the current allocator
// routing), and returns tensors; plus the metadata the tree needs.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/tensor.h"

namespace grove::compiler {

// Why a segment cannot be captured into a graph.
enum class CaptureBlocker {
  kNone,            // capturable
  kNeedsHostSync,   // e.g. nonzero: output shape depends on data
  kHostOnly,        // runs on the host only
  kCpuTensors,      // touches cpu tensors
  kSeveralDevices,  // touches more than one device
};

const char* capture_blocker_name(CaptureBlocker blocker);

// A contiguous run of a lowered function's work that is either capturable as
// a whole or not at all. Backends that capture piecewise ("cudagraphs") turn
// each capturable segment into a function of its own.
struct Segment {
  CaptureBlocker blocker = CaptureBlocker::kNone;
  std::string op;           // the op that made it non-capturable, when it is not
  std::string node_name;    // that op's node name in the model
  size_t kernel_count = 0;  // generated kernels one call of the segment launches
  size_t gemm_count = 0;    // library GEMMs (cuBLAS / host GEMM) it launches
  bool capturable() const { return blocker == CaptureBlocker::kNone; }
};

using TensorList = std::vector<runtime::Tensor>;
using Callable = std::function<TensorList(const TensorList& inputs)>;

struct LoweredFunction {
  std::string name;  // for messages: "<model>:forward"
  Callable call;
  // Inputs whose storage is persistent with a fixed address (params, buffers).
  std::vector<size_t> static_input_indices;
  // Inputs the function writes in place.
  std::vector<size_t> mutated_input_indices;
  // For each output, the input it aliases (shares storage with), if any.
  std::vector<std::optional<size_t>> output_aliases_input;
  std::vector<runtime::Device> devices;
  std::vector<Segment> segments;
};

}  // namespace grove::compiler
