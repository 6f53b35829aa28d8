#include "compiler/backends/backend_registry.h"

#include <map>
#include <mutex>

#include "runtime/error.h"

namespace grove::compiler::backends {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry* instance = [] {
    auto* built = new Registry();
    built->factories["eager"] = make_eager_backend;
    return built;
  }();
  return *instance;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  GROVE_CHECK(!name.empty() && factory, "register_backend: a backend needs a name and a factory");
  GROVE_CHECK(state.factories.count(name) == 0, "register_backend: a backend named '", name,
              "' is already registered");
  state.factories[name] = std::move(factory);
}

std::unique_ptr<ExecutionBackend> make_backend(const std::string& name) {
  Registry& state = registry();
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto found = state.factories.find(name);
    if (found == state.factories.end()) {
      std::string known;
      for (const auto& [known_name, unused] : state.factories) {
        known += (known.empty() ? "" : ", ") + known_name;
      }
      throw Error(str_cat("unknown backend '", name, "'; known backends: ", known));
    }
    factory = found->second;
  }
  return factory();
}

std::vector<std::string> backend_names() {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<std::string> names;
  for (const auto& [name, unused] : state.factories) names.push_back(name);
  return names;
}

namespace {

class EagerBackend : public ExecutionBackend {
 public:
  std::string name() const override { return "eager"; }
  Callable prepare(const lowering::LoweredProgram& lowered, const CompileOptions&) override {
    // Note [One input check per call]: the door checked the arguments.
    return [lowered](const TensorList& inputs) {
      return lowered.run(inputs, lowering::InputCheck::kCheckedByDoor);
    };
  }
};

}  // namespace

std::unique_ptr<ExecutionBackend> make_eager_backend() { return std::make_unique<EagerBackend>(); }

}  // namespace grove::compiler::backends
