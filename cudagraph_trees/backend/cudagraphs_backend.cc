#include "cudagraph_trees/backend/cudagraphs_backend.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "cudagraph_trees/backend/prepared_program.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::Callable;
using compiler::backends::CompileOptions;
using compiler::backends::ExecutionBackend;
using compiler::lowering::LoweredProgram;

// The backend's side of the one door (docs/ARCHITECTURE.md, section 3): every
// question about the tree goes to the calling thread's tree manager of the
// device its programs record on.
class CudagraphsBackend : public ExecutionBackend {
 public:
  std::string name() const override { return "cudagraphs"; }

  Callable prepare(const LoweredProgram& lowered, const CompileOptions& options) override {
    std::shared_ptr<PreparedProgram> program = PreparedProgram::prepare(lowered, options);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      programs_.push_back(program);
    }
    return [program](const TensorList& inputs) { return program->call(inputs); };
  }

  compiler::backends::BackendStats stats() const override {
    compiler::backends::BackendStats stats{.backend = "cudagraphs"};
    std::optional<runtime::Device> device;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& program : programs_) {
        stats.programs.push_back(program->stats());
        if (program->any_captured()) device = program->device();
      }
    }
    // The calling thread's tree for the device (created on first use).
    if (device) stats.tree = tree_manager_for(*device).stats();
    return stats;
  }

  std::string dot() const override {
    std::optional<runtime::Device> device = tree_device();
    return device ? tree_manager_for(*device).dot() : "";
  }

  // The calling thread's tree's pool; no device when it has none.
  compiler::backends::BackendMemory memory() const override {
    std::optional<runtime::Device> device = tree_device();
    TreeManager* manager = device ? find_tree_manager(*device) : nullptr;
    if (manager == nullptr) return {};
    return {.device = *device,
            .pool = runtime::device_context(*device).allocator().stats(manager->pool())};
  }

  void mark_step_begin() override {
    for (runtime::Device device : graph_devices()) {
      if (TreeManager* manager = find_tree_manager(device)) manager->mark_step_begin();
    }
  }

  void reset() override {
    for (runtime::Device device : graph_devices()) reset_tree_manager(device);
  }

  std::vector<runtime::GraphRecording*> current_path_graphs() const override {
    std::optional<runtime::Device> device = tree_device();
    TreeManager* manager = device ? find_tree_manager(*device) : nullptr;
    return manager != nullptr ? manager->current_path_graphs()
                              : std::vector<runtime::GraphRecording*>{};
  }

 private:
  // The device whose tree stats(), dot() and memory() describe: that
  // of the last prepared program that records a segment.
  std::optional<runtime::Device> tree_device() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::optional<runtime::Device> device;
    for (const auto& program : programs_) {
      if (program->any_captured()) device = program->device();
    }
    return device;
  }
  // Every device a prepared program records segments on.
  std::vector<runtime::Device> graph_devices() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<runtime::Device> devices;
    for (const auto& program : programs_) {
      if (program->any_captured() &&
          std::find(devices.begin(), devices.end(), program->device()) == devices.end()) {
        devices.push_back(program->device());
      }
    }
    return devices;
  }

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<PreparedProgram>> programs_;
};

// Registers at load time; the library is alwayslink so the linker keeps it.
const bool registered_at_load = [] {
  register_cudagraphs_backend();
  return true;
}();

}  // namespace

std::unique_ptr<ExecutionBackend> make_cudagraphs_backend() {
  return std::make_unique<CudagraphsBackend>();
}

void register_cudagraphs_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names = compiler::backends::backend_names();
    for (const std::string& name : names) {
      if (name == "cudagraphs") return;
    }
    compiler::backends::register_backend("cudagraphs", make_cudagraphs_backend);
  });
}

}  // namespace grove::cudagraph_trees::backend
