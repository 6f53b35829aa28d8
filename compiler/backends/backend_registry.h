// Execution backends by name: how a lowered program is run. "eager" runs the
// lowered function directly; a later issue adds "cudagraphs" (segments handed
// to the tree manager). compile() (compile.h) picks one by name.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/lowered_function.h"
#include "compiler/lowering/lower.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::backends {

struct CompileOptions {
  std::string backend = "eager";
  // Where the model runs; empty: the program's own device.
  std::optional<runtime::Device> device;
  ops::ExecMode mode = ops::ExecMode::kInference;
  // Which training program this is ("forward", "backward", "optimizer"; empty:
  // a whole model). Graph backends use it to pick the recording mode.
  std::string stage;
};

class ExecutionBackend {
 public:
  virtual ~ExecutionBackend() = default;
  virtual std::string name() const = 0;
  // A callable taking every program input (Program::inputs() order) and
  // returning the outputs. It may keep state (graphs, pools); it is called
  // from the thread that compiled it or any other, one call at a time.
  virtual Callable prepare(const lowering::LoweredProgram& lowered,
                           const CompileOptions& options) = 0;
  // What the backend knows about the programs it prepared, as JSON text
  // ("{}" when it keeps nothing), and a Graphviz picture ("" when none).
  virtual std::string stats_json() const { return "{}"; }
  virtual std::string dot() const { return ""; }
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
