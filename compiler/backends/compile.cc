#include "compiler/backends/compile.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <new>

#include "compiler/ir/generator_state.h"
#include "compiler/lowering/lower.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/philox_generator.h"

namespace grove::compiler::backends {
namespace {

using runtime::DType;
using runtime::Tensor;

// Note [Reused argument lists]: a call hands the backend one list holding
// every program input: the params and buffers (persistent_) and the caller's
// inputs at their positions. Building that list per call cost a heap
// allocation plus a reference-count increment and decrement per param (33
// params in mlp16x512), on a path whose whole budget is about a microsecond.
// So the model keeps spare lists with the params already in place: a call
// takes one, writes the caller's inputs into it, and on the way out (thrown
// or not) resets those positions, so the list never keeps a caller's tensor
// alive (the tree manager judges output liveness by reference counts), and
// gives it back. Lists are taken under a mutex: concurrent callers each get
// their own, and a nested call simply takes another.
class ArgumentLease {
 public:
  using Lists = std::vector<std::unique_ptr<TensorList>>;
  ArgumentLease(std::mutex& mutex, Lists& spare, const std::vector<Tensor>& persistent,
                const std::vector<size_t>& input_positions)
      : mutex_(mutex), spare_(spare), input_positions_(input_positions) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!spare_.empty()) {
        list_ = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (list_ == nullptr) list_ = std::make_unique<TensorList>(persistent);
  }
  ~ArgumentLease() {
    for (size_t position : input_positions_) (*list_)[position] = Tensor();
    std::lock_guard<std::mutex> lock(mutex_);
    spare_.push_back(std::move(list_));
  }
  ArgumentLease(const ArgumentLease&) = delete;
  ArgumentLease& operator=(const ArgumentLease&) = delete;
  TensorList& list() { return *list_; }

 private:
  std::mutex& mutex_;
  Lists& spare_;
  const std::vector<size_t>& input_positions_;
  std::unique_ptr<TensorList> list_;
};

// "8589934592 bytes", or "more than 2^63 bytes" when the product overflows.
std::string byte_count(int64_t numel, size_t element_size) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(element_size), &bytes)) {
    return "more than 2^63 bytes";
  }
  return str_cat(bytes, " bytes");
}

}  // namespace

// Note [Parameters made in chunks]: a param or buffer is allocated on its
// device first, so the device's limit (GROVE_SIM_MEMORY_BYTES on sim) refuses
// one that does not fit before any host memory is spent on it, with an error
// naming the value and its bytes; then its initial values are made and copied
// in chunks of kInitChunk elements, encoded straight into the dtype. Host
// memory stays under kInitChunk * 16 bytes whatever the size: a 2^31-element
// param used to build a vector<double> of numel (16 GiB) before any limit
// applied. Test: GroveLimits.HugeParameterFailsFastNamingItsBytesWithBoundedMemory.
Tensor initial_tensor(const ir::Value& value, runtime::Device device) {
  constexpr int64_t kInitChunk = int64_t{1} << 20;
  GROVE_CHECK(value.initializer.has_value(), "initial_tensor: ", ir::value_kind_name(value.kind),
              " '", value.name, "' has no initializer");
  const int64_t numel = value.type.numel();
  const size_t element_size = runtime::dtype_size(value.type.dtype);
  const std::string what = str_cat(ir::value_kind_name(value.kind), " '", value.name, "' (",
                                   value.type.str(), ", ", byte_count(numel, element_size), ")");
  Tensor tensor;
  try {
    tensor = Tensor::empty(value.type.shape, value.type.dtype, device);
  } catch (const OutOfMemoryError& error) {
    throw OutOfMemoryError(str_cat(what, " does not fit on ", device.str(), ": ", error.what()));
  } catch (const ShapeError& error) {
    throw ShapeError(str_cat(what, ": ", error.what()));
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(
        str_cat(what, " does not fit in the host memory of ", device.str(), "; make it smaller"));
  }
  Tensor flat = tensor.view({numel});
  std::vector<double> values;
  std::vector<uint8_t> bytes;
  for (int64_t first = 0; first < numel; first += kInitChunk) {
    const int64_t count = std::min(kInitChunk, numel - first);
    values.resize(static_cast<size_t>(count));
    bytes.resize(static_cast<size_t>(count) * element_size);
    ir::initial_values_range(*value.initializer, value.type, first, values);
    for (size_t i = 0; i < values.size(); ++i) {
      runtime::store_element(bytes.data() + i * element_size, value.type.dtype, values[i]);
    }
    flat.slice(0, first, first + count).copy_from_host(bytes.data());
  }
  return tensor;
}

CompiledModel compile(const ir::Program& program, const CompileOptions& options) {
  runtime::Device device = options.device ? *options.device : program.device();
  return compile(
      program, options, [device](const ir::Value& value) { return initial_tensor(value, device); },
      make_backend(options.backend));
}

CompiledModel compile(const ir::Program& program, const CompileOptions& options,
                      const StateBinder& bind_state, std::shared_ptr<ExecutionBackend> backend) {
  auto start = std::chrono::steady_clock::now();
  GROVE_CHECK(backend != nullptr && backend->name() == options.backend, "compile of '",
              program.name(), "': the shared backend is '", backend ? backend->name() : "none",
              "', the options name '", options.backend, "'; pass a backend of that name");
  CompiledModel model;
  if (options.device && *options.device != program.device()) {
    // Retarget through the model format, which binds every type to the device.
    model.program_ = std::make_shared<const ir::Program>(
        model_format::load_model(model_format::export_model(program), {}, *options.device));
  } else {
    model.program_ = std::make_shared<const ir::Program>(program);
  }
  const ir::Program& target = *model.program_;
  GROVE_CHECK_AS(DeviceError, runtime::device_available(target.device()), "compile of '",
                 target.name(), "': device ", target.device().str(),
                 " is not available here; compile for ", runtime::default_device().str(),
                 " instead");
  target.verify();
  model.backend_name_ = backend->name();
  lowering::LowerOptions lower_options;
  lower_options.mode = exec_mode(options.stage);
  if (!options.small_m_gemm.empty()) {
    lower_options.small_m_gemm =
        lowering::parse_small_m_gemm_mode(options.small_m_gemm, "option 'small_m_gemm'");
  }
  lower_options.gemm_search = options.gemm_search;
  lower_options.sibling_gemms = options.sibling_gemms;
  auto lower_start = std::chrono::steady_clock::now();
  model.lowered_ =
      std::make_shared<const lowering::LoweredProgram>(lowering::lower(target, lower_options));
  model.lower_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - lower_start)
          .count();
  model.call_ = backend->prepare(*model.lowered_, options);
  model.backend_ = std::move(backend);
  model.persistent_.resize(target.inputs().size());
  for (size_t i = 0; i < target.inputs().size(); ++i) {
    const ir::Value& value = target.value(target.inputs()[i]);
    if (value.is_persistent()) {
      Tensor tensor = bind_state(value);
      GROVE_CHECK(tensor.defined() && tensor.device() == value.type.device &&
                      tensor.dtype() == value.type.dtype && tensor.shape() == value.type.shape,
                  "compile of '", target.name(), "': ", ir::value_kind_name(value.kind), " '",
                  value.name, "' of type ", value.type.str(),
                  " is bound to a tensor of another type, device or shape; programs sharing "
                  "state must agree on it");
      model.persistent_[i] = std::move(tensor);
      model.state_positions_[value.name] = i;
    } else {
      model.input_positions_.push_back(i);
      model.input_names_.push_back(value.name);
    }
  }
  model.generator_draws_ = ir::generator_draws(target);
  if (model.generator_draws_ > 0) {
    ir::GeneratorState state = *ir::find_generator_state(target);
    model.generator_seed_position_ = static_cast<size_t>(target.input_position(state.seed));
    model.generator_offset_position_ = static_cast<size_t>(target.input_position(state.offset));
  }
  model.total_compile_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return model;
}

namespace {

void check_input_count(const ir::Program& program, const std::vector<std::string>& names,
                       size_t given) {
  GROVE_CHECK_AS(
      ShapeError, given == names.size(), "model '", program.name(), "' takes ", names.size(),
      " inputs (",
      [&] {
        std::string list;
        for (const std::string& name : names) list += (list.empty() ? "'" : ", '") + name + "'";
        return list;
      }(),
      "), found ", given);
}

}  // namespace

void CompiledModel::check_input(size_t k, const Tensor& tensor) const {
  const ir::Program& program = *program_;
  const ir::Value& value = program.value(program.inputs()[input_positions_[k]]);
  // Built only when a check fails: formatting it on every call costs about
  // a microsecond per input, more than a graph replay's whole host cost.
  auto name = [&] {
    return str_cat("model '", program.name(), "': input '", value.name, "' (", k, ")");
  };
  GROVE_CHECK(tensor.defined(), name(), " is an undefined tensor; pass a tensor of ",
              value.type.str());
  GROVE_CHECK_AS(DeviceError, tensor.device() == value.type.device, name(), " expects a tensor on ",
                 value.type.device.str(), ", found one on ", tensor.device().str(), "; move it to ",
                 value.type.device.str(), " first");
  GROVE_CHECK_AS(DTypeError, tensor.dtype() == value.type.dtype, name(), " expects dtype ",
                 runtime::dtype_name(value.type.dtype), ", found ",
                 runtime::dtype_name(tensor.dtype()));
  GROVE_CHECK_AS(ShapeError, tensor.shape() == value.type.shape, name(), " expects shape ",
                 ir::shape_text(value.type.shape), ", found ", runtime::shape_str(tensor.shape()),
                 "; the model was compiled for these dims (recompile for other sizes)");
}

TensorList CompiledModel::operator()(const TensorList& inputs) const {
  input_checks_->fetch_add(1, std::memory_order_relaxed);
  check_input_count(*program_, input_names_, inputs.size());
  ArgumentLease lease(argument_lists_->mutex, argument_lists_->spare, persistent_,
                      input_positions_);  // Note [Reused argument lists]
  TensorList& all = lease.list();
  for (size_t k = 0; k < inputs.size(); ++k) {
    check_input(k, inputs[k]);
    all[input_positions_[k]] = inputs[k];
  }
  return run(all);
}

BoundInputs CompiledModel::bind_inputs(TensorList inputs) const {
  input_checks_->fetch_add(1, std::memory_order_relaxed);
  check_input_count(*program_, input_names_, inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) check_input(k, inputs[k]);
  return BoundInputs(std::move(inputs), program_.get());
}

TensorList CompiledModel::operator()(const BoundInputs& inputs) const {
  // Identity, not a shape or dtype check: the tensors were checked when bound.
  GROVE_CHECK(inputs.model_ == program_.get(), "model '", program_->name(),
              "': these inputs were bound by another model (or not at all); bind them with "
              "this model's bind_inputs()");
  ArgumentLease lease(argument_lists_->mutex, argument_lists_->spare, persistent_,
                      input_positions_);  // Note [Reused argument lists]
  TensorList& all = lease.list();
  for (size_t k = 0; k < inputs.tensors_.size(); ++k) all[input_positions_[k]] = inputs.tensors_[k];
  return run(all);
}

TensorList CompiledModel::run(TensorList& all) const {
  if (generator_draws_ > 0) [[unlikely]] {
    // Note [Implicit generator] (compiler/ir/generator_state.h).
    runtime::store_generator_state(
        persistent_[generator_seed_position_], persistent_[generator_offset_position_],
        runtime::default_generator(device()).reserve(static_cast<uint64_t>(generator_draws_)));
  }
  // Note [One input check per call]: the backend runs `all` without checking again.
  return call_(all);
}

const Tensor& CompiledModel::state(const std::string& name) const {
  auto found = state_positions_.find(name);
  GROVE_CHECK(found != state_positions_.end(), "model '", program_->name(),
              "' has no param or buffer named '", name, "'");
  return persistent_[found->second];
}

std::vector<std::string> CompiledModel::state_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : state_positions_) names.push_back(name);
  return names;
}

}  // namespace grove::compiler::backends
