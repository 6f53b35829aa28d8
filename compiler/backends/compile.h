// compile(): a Program becomes a CompiledModel, the object users call. It
// lowers the program, prepares the chosen backend, and owns the model's
// persistent state (params and buffers) as device tensors initialized from
// their initializers; a call takes only the program's `input` values.
//
//   CompiledModel model = compile(program, {.backend = "eager"});
//   TensorList outputs = model({x});
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/backends/backend_registry.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_program.h"

namespace grove::compiler::backends {

// The tensor a program of a group binds to its param or buffer `value`
// (compile() below, for programs that share their state).
using StateBinder = std::function<runtime::Tensor(const ir::Value& value)>;

// Input tensors one CompiledModel checked once for many calls
// (CompiledModel::bind_inputs): the tensors stay, what they hold changes
// between calls (a server's bucket inputs, Note [One input check per call]).
class BoundInputs {
 public:
  BoundInputs() = default;
  const TensorList& tensors() const { return tensors_; }

 private:
  friend class CompiledModel;
  BoundInputs(TensorList tensors, const void* model)
      : tensors_(std::move(tensors)), model_(model) {}

  TensorList tensors_;
  const void* model_ = nullptr;  // the program of the model that checked them
};

class CompiledModel {
 public:
  // Runs the model on the `input` values of the program, in declaration order.
  // Throws grove::Error (ShapeError, DTypeError, DeviceError) naming the input
  // when the count, a shape, a dtype or a device is wrong.
  TensorList operator()(const TensorList& inputs) const;
  // Checks `inputs` as operator() does, once, for calls of operator()(BoundInputs).
  BoundInputs bind_inputs(TensorList inputs) const;
  // Runs the model on inputs it bound, checking nothing again (Note [One
  // input check per call]). Throws grove::Error for inputs another model bound.
  TensorList operator()(const BoundInputs& inputs) const;
  // How many times this model (and its copies) checked call inputs: each
  // operator()(TensorList) and each bind_inputs(); tests count them.
  uint64_t input_checks() const { return input_checks_->load(std::memory_order_relaxed); }

  const ir::Program& program() const { return *program_; }
  const lowering::LoweredProgram& lowered() const { return *lowered_; }
  const std::string& backend() const { return backend_name_; }
  runtime::Device device() const { return program_->device(); }
  // The params and buffers, by name (mutated in place by update ops).
  const runtime::Tensor& state(const std::string& name) const;
  std::vector<std::string> state_names() const;
  // Names of the per-call inputs, in call order.
  const std::vector<std::string>& input_names() const { return input_names_; }
  lowering::KernelReport kernel_report() const { return lowered_->kernel_report(); }
  // Code generation time of this compile (0 when every kernel was cached).
  double compile_ms() const { return lowered_->compile_ms(); }
  // Wall time of lowering (fusion, scheduling, code generation or cache hits):
  // the JIT compile time. State initialization is not included.
  double lower_ms() const { return lower_ms_; }
  // Wall time of the whole compile (lowering, code generation, state initialization).
  double total_compile_ms() const { return total_compile_ms_; }
  // The door to the execution backend: callers (cli, serving, benchmarks,
  // the C API) reach what the backend keeps only through these, never
  // through the tree manager itself (docs/ARCHITECTURE.md, "One door").
  // The backend's stats (values; JSON at the edges: backend_stats_json.h) and
  // Graphviz picture, e.g. the graph tree of "cudagraphs"; empty / "" for
  // backends that keep none.
  BackendStats backend_stats() const { return backend_->stats(); }
  std::string backend_dot() const { return backend_->dot(); }
  // Device memory the backend holds beyond the model's tensors.
  BackendMemory backend_memory() const { return backend_->memory(); }
  // Starts a new step on the calling thread: outputs of earlier calls may be
  // overwritten by later ones (PyTorch's cudagraph_mark_step_begin).
  void mark_step_begin() const { backend_->mark_step_begin(); }
  // Drops the backend's recorded graphs and pools; earlier outputs must not
  // be used afterwards.
  void reset_backend() const { backend_->reset(); }
  // Philox counters one call draws from the device's implicit generator
  // (Note [Implicit generator], compiler/ir/generator_state.h); 0 for a
  // model without implicit random ops.
  int64_t generator_draws() const { return generator_draws_; }
  // The graphs the last call's path replays, root first (empty for eager).
  std::vector<runtime::GraphRecording*> backend_graphs() const {
    return backend_->current_path_graphs();
  }

 private:
  friend CompiledModel compile(const ir::Program& program, const CompileOptions& options,
                               const StateBinder& bind_state,
                               std::shared_ptr<ExecutionBackend> backend);
  CompiledModel() = default;
  // Checks input k of a call (count checked by the caller) and counts nothing.
  void check_input(size_t k, const runtime::Tensor& tensor) const;
  // Runs the program on the leased list with the caller's inputs in place.
  TensorList run(TensorList& all) const;

  std::shared_ptr<const ir::Program> program_;
  std::shared_ptr<const lowering::LoweredProgram> lowered_;
  std::string backend_name_;
  Callable call_;
  std::shared_ptr<ExecutionBackend> backend_;  // never null
  // One entry per Program::inputs(); params and buffers hold their tensors.
  std::vector<runtime::Tensor> persistent_;
  // Note [Reused argument lists] (compile.cc).
  struct ArgumentLists {
    std::mutex mutex;
    std::vector<std::unique_ptr<TensorList>> spare;
  };
  std::shared_ptr<ArgumentLists> argument_lists_ = std::make_shared<ArgumentLists>();
  std::vector<size_t> input_positions_;  // positions of the `input` values
  std::vector<std::string> input_names_;
  std::map<std::string, size_t> state_positions_;
  std::shared_ptr<std::atomic<uint64_t>> input_checks_ = std::make_shared<std::atomic<uint64_t>>(0);
  double lower_ms_ = 0;
  double total_compile_ms_ = 0;
  int64_t generator_draws_ = 0;
  size_t generator_seed_position_ = 0;  // in persistent_
  size_t generator_offset_position_ = 0;
};

// Throws grove::Error naming the node (lowering), the backend (unknown name)
// or the device (absent).
CompiledModel compile(const ir::Program& program, const CompileOptions& options = {});
// compile() of one of several programs that run together and share their
// params, buffers and backend (a training step's forward, backward and
// optimizer step, training/trainer.h): each param or buffer is bound
// to bind_state(value), which must match its type, instead of a fresh tensor
// from its initializer, and `backend` (named options.backend) prepares the
// program, so its stats and step marks cover the whole group.
CompiledModel compile(const ir::Program& program, const CompileOptions& options,
                      const StateBinder& bind_state, std::shared_ptr<ExecutionBackend> backend);

// A tensor on `device` holding the initial value of param/buffer `value`.
runtime::Tensor initial_tensor(const ir::Value& value, runtime::Device device);

}  // namespace grove::compiler::backends
