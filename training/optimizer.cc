#include "training/optimizer.h"

#include <set>

#include "compiler/autodiff/training_programs.h"
#include "compiler/ir/builder.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::training {

const char* optimizer_kind_name(OptimizerKind kind) {
  return kind == OptimizerKind::kSgdMomentum ? "sgd_momentum" : "adamw";
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
    if (name == optimizer_kind_name(kind)) return kind;
  }
  throw Error(str_cat("unknown optimizer '", name, "' (use 'sgd_momentum' or 'adamw')"));
}

std::vector<double> OptimizerProgram::hyperparameter_values(const Hyperparameters& h,
                                                            int64_t step) const {
  GROVE_CHECK(step >= 1, "OptimizerProgram: the step count is 1-based, found ", step);
  if (kind == OptimizerKind::kSgdMomentum) return {h.lr, h.momentum, h.weight_decay};
  return {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, static_cast<double>(step)};
}

OptimizerProgram build_optimizer_program(const compiler::ir::Program& model,
                                         const std::vector<compiler::ir::ValueId>& params,
                                         OptimizerKind kind, GradientSource gradients) {
  GROVE_CHECK(!params.empty(), "build_optimizer_program: no params given for program '",
              model.name(), "'");
  OptimizerProgram result;
  result.kind = kind;
  compiler::ir::ProgramBuilder b(model.name() + "." + optimizer_kind_name(kind), model.device());
  result.hyperparameter_names =
      kind == OptimizerKind::kSgdMomentum
          ? std::vector<std::string>{"lr", "momentum", "weight_decay"}
          : std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "step"};
  std::vector<compiler::ir::ValueId> hyper;
  for (const std::string& name : result.hyperparameter_names) {
    hyper.push_back(b.input(name, {}, runtime::DType::kF32));
  }
  compiler::ir::ValueId flat_gradients = -1;
  int64_t flat_offset = 0;
  if (gradients == GradientSource::kFlatInput) {
    int64_t total = 0;
    for (compiler::ir::ValueId id : params) {
      GROVE_CHECK(id >= 0 && id < static_cast<compiler::ir::ValueId>(model.values().size()),
                  "build_optimizer_program: value id ", id, " of program '", model.name(),
                  "' is not a param");
      const compiler::ir::Value& param = model.value(id);
      const compiler::ir::Value& first = model.value(params.front());
      GROVE_CHECK_AS(DTypeError, param.type.dtype == first.type.dtype,
                     "build_optimizer_program: flat gradients need one dtype for every param; '",
                     first.name, "' is ", runtime::dtype_name(first.type.dtype), ", '", param.name,
                     "' is ", runtime::dtype_name(param.type.dtype));
      total += param.type.numel();
    }
    flat_gradients = b.input("grads", {total}, model.value(params.front()).type.dtype);
  }
  std::set<compiler::ir::ValueId> seen;
  for (compiler::ir::ValueId id : params) {
    GROVE_CHECK(id >= 0 && id < static_cast<compiler::ir::ValueId>(model.values().size()) &&
                    model.value(id).kind == compiler::ir::ValueKind::kParam,
                "build_optimizer_program: value id ", id, " of program '", model.name(),
                "' is not a param");
    const compiler::ir::Value& param = model.value(id);
    GROVE_CHECK_AS(DTypeError, runtime::is_floating(param.type.dtype),
                   "build_optimizer_program: param '", param.name, "' is ", param.type.str(),
                   "; only floating params can be optimized");
    GROVE_CHECK(seen.insert(id).second, "build_optimizer_program: param '", param.name,
                "' is listed twice");
    const compiler::ir::TensorType& type = param.type;
    compiler::ir::ValueId value = b.param(param.name, type.shape, type.dtype, *param.initializer);
    const std::string grad_name = compiler::autodiff::gradient_buffer_name(param.name);
    compiler::ir::ValueId grad = -1;
    if (gradients == GradientSource::kBuffer) {
      grad = b.buffer(grad_name, type.shape, type.dtype, compiler::ir::zeros_init());
    } else if (gradients == GradientSource::kInput) {
      grad = b.input(grad_name, type.shape, type.dtype);
    } else {
      const int64_t numel = type.numel();
      compiler::ir::ValueId part =
          b.slice(flat_gradients, 0, flat_offset, flat_offset + numel, grad_name + ".flat");
      grad = b.reshape(part, type.shape, grad_name);
      flat_offset += numel;
    }
    result.params.push_back(value);
    result.gradients.push_back(grad);
    if (kind == OptimizerKind::kSgdMomentum) {
      compiler::ir::ValueId momentum =
          b.buffer(param.name + ".momentum", type.shape, type.dtype, compiler::ir::zeros_init());
      result.state.push_back({momentum});
      b.sgd_momentum_update(value, grad, momentum, hyper[0], hyper[1], hyper[2],
                            param.name + ".sgd");
    } else {
      compiler::ir::ValueId exp_avg =
          b.buffer(param.name + ".exp_avg", type.shape, type.dtype, compiler::ir::zeros_init());
      compiler::ir::ValueId exp_avg_sq =
          b.buffer(param.name + ".exp_avg_sq", type.shape, type.dtype, compiler::ir::zeros_init());
      result.state.push_back({exp_avg, exp_avg_sq});
      b.adamw_update(value, grad, exp_avg, exp_avg_sq, hyper[0], hyper[1], hyper[2], hyper[3],
                     hyper[4], hyper[5], param.name + ".adamw");
    }
  }
  result.program = b.build();
  return result;
}

std::vector<size_t> mutated_input_positions(const compiler::ir::Program& program) {
  const compiler::ops::OpRegistry& registry = compiler::ops::OpRegistry::global();
  // The input position whose storage each value is (through aliasing results), or -1.
  std::vector<int64_t> storage(program.values().size(), -1);
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    storage[static_cast<size_t>(program.inputs()[i])] = static_cast<int64_t>(i);
  }
  std::set<size_t> mutated;
  for (const compiler::ir::Node& node : program.nodes()) {
    const compiler::ops::Effects& effects = registry.get(node.op).effects;
    for (int operand : effects.mutated_operands) {
      if (operand >= static_cast<int>(node.operands.size())) continue;
      int64_t position = storage[static_cast<size_t>(node.operands[static_cast<size_t>(operand)])];
      if (position >= 0) mutated.insert(static_cast<size_t>(position));
    }
    for (size_t r = 0; r < node.results.size() && r < effects.result_aliases.size(); ++r) {
      if (!effects.result_aliases[r]) continue;
      auto source = static_cast<size_t>(*effects.result_aliases[r]);
      if (source < node.operands.size()) {
        storage[static_cast<size_t>(node.results[r])] =
            storage[static_cast<size_t>(node.operands[source])];
      }
    }
  }
  return {mutated.begin(), mutated.end()};
}

}  // namespace grove::training
