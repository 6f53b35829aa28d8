// Execution backends by name: how a lowered program is run. "eager" runs the
// lowered function directly; "cudagraphs" (cudagraph_trees/backend) hands
// capturable segments to the tree manager. compile() (compile.h) picks one by
// name, and CompiledModel is the one door callers use to reach it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backends/backend_stats.h"
#include "compiler/backends/stage.h"
#include "compiler/lowered_function.h"
#include "compiler/lowered_program.h"
#include "runtime/graph_recording.h"

namespace grove::compiler::backends {

struct CompileOptions {
  std::string backend = "eager";
  // Where the model runs; empty: the program's own device.
  std::optional<runtime::Device> device;
  // A whole model, or which program of a training step; it implies the
  // lowering mode (exec_mode(stage)) and a graph backend's recording mode.
  Stage stage = Stage::kInference;
  // For a graph backend ("cudagraphs"; others ignore them): never record the
  // model's segments, so they run eagerly through the backend, or record them
  // on their first call without a warm-up, for a model known to be
  // capture-safe (cudagraph_trees: Note [Function controls]).
  bool never_capture = false;
  bool skip_warmup = false;
  // Grove's small-M GEMM kernel for this compile: "off", "on" or "auto"
  // (Note [Small-M GEMM selection], compiler/lowering/small_m_gemm.cc); empty:
  // GROVE_SMALL_M_GEMM decides. Checked when the model compiles.
  std::string small_m_gemm;
  // The program's library GEMMs take the fastest of cuBLASLt's candidates,
  // timed once per process and shape (Note [GEMM algorithms by measurement];
  // GROVE_GEMM_SEARCH=1 does it for every program).
  bool gemm_search = false;
  // GEMMs that share an operand become one over the concatenated others
  // before scheduling (Note [Sibling GEMMs as one]; GROVE_FUSE_SIBLING_GEMMS=1
  // does it for every program).
  bool sibling_gemms = false;
};

class ExecutionBackend {
 public:
  virtual ~ExecutionBackend() = default;
  virtual std::string name() const = 0;
  // A callable taking every program input (Program::inputs() order) and
  // returning the outputs. It may keep state (graphs, pools); it is called
  // from the thread that compiled it or any other, one call at a time, and
  // only by CompiledModel, with arguments it checked (Note [One input check
  // per call], compiler/lowered_program.h).
  virtual Callable prepare(const lowering::LoweredProgram& lowered,
                           const CompileOptions& options) = 0;
  // What the backend knows about the programs it prepared (empty when it
  // keeps nothing), and a Graphviz picture ("" when none).
  virtual BackendStats stats() const { return {}; }
  virtual std::string dot() const { return ""; }
  // The device memory the backend holds for its programs beyond their
  // tensors (a graph backend's private pool); no device when none.
  virtual BackendMemory memory() const { return {}; }
  // Starts a new step on the calling thread: outputs of earlier calls may be
  // overwritten by the next call (PyTorch's cudagraph_mark_step_begin). A
  // no-op for backends that keep no outputs between calls.
  virtual void mark_step_begin() {}
  // Drops what the backend recorded (graphs, pools); the next call records
  // anew. Outputs of earlier calls must not be used afterwards.
  virtual void reset() {}
  // The graphs of the path the calling thread's tree ran last, root first:
  // what a bare replay of the last call launches (benchmarks time it). Empty
  // for backends that record no graphs.
  virtual std::vector<runtime::GraphRecording*> current_path_graphs() const { return {}; }
};

using BackendFactory = std::function<std::unique_ptr<ExecutionBackend>()>;

// Registers a backend; throws grove::Error when the name is taken.
void register_backend(const std::string& name, BackendFactory factory);
// A new instance of backend `name`; throws grove::Error listing the known backends.
std::unique_ptr<ExecutionBackend> make_backend(const std::string& name);
std::vector<std::string> backend_names();  // sorted

// "eager": runs LoweredProgram::function() as is.
std::unique_ptr<ExecutionBackend> make_eager_backend();

}  // namespace grove::compiler::backends
