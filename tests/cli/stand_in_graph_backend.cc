#include "tests/cli/stand_in_graph_backend.h"

#include <memory>

#include "cli/tree_stats.h"
#include "compiler/backends/backend_registry.h"
#include "cudagraph_trees/tree_manager.h"

namespace grove::cli::testing {
namespace {

using compiler::TensorList;

class StandInGraphBackend : public compiler::backends::ExecutionBackend {
 public:
  std::string name() const override { return kGraphBackend; }
  compiler::Callable prepare(const compiler::lowering::LoweredProgram& lowered,
                             const compiler::backends::CompileOptions& options) override {
    const compiler::LoweredFunction& function = lowered.function();
    if (options.mode != compiler::ops::ExecMode::kInference) return function.call;
    runtime::Device device = lowered.program().device();
    auto& manager = cudagraph_trees::tree_manager_for(device);
    cudagraph_trees::FunctionId id = manager.register_function(
        {function.name, cudagraph_trees::CompilationMode::kInference, function.static_input_indices,
         function.mutated_input_indices, function.call, function.devices});
    return [device, id](const TensorList& inputs) {
      return cudagraph_trees::tree_manager_for(device).run(id, inputs);
    };
  }
};

}  // namespace

bool register_stand_in_graph_backend() {
  if (backend_registered(kGraphBackend)) return false;
  compiler::backends::register_backend(kGraphBackend,
                                       [] { return std::make_unique<StandInGraphBackend>(); });
  return true;
}

}  // namespace grove::cli::testing
