#include "compiler/ir/builder.h"

#include "compiler/ir/generator_state.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::compiler::ir {

Initializer zeros_init() { return Initializer{}; }

Initializer ones_init() {
  Initializer init;
  init.kind = InitKind::kOnes;
  return init;
}

Initializer constant_init(double value) {
  Initializer init;
  init.kind = InitKind::kConstant;
  init.value = value;
  return init;
}

Initializer normal_init(double std, uint64_t seed, double mean) {
  Initializer init;
  init.kind = InitKind::kNormal;
  init.std = std;
  init.mean = mean;
  init.seed = seed;
  return init;
}

Initializer uniform_init(double low, double high, uint64_t seed) {
  Initializer init;
  init.kind = InitKind::kUniform;
  init.low = low;
  init.high = high;
  init.seed = seed;
  return init;
}

Initializer tril_init() {
  Initializer init;
  init.kind = InitKind::kTril;
  return init;
}

ProgramBuilder::ProgramBuilder(std::string name, Device device)
    : program_(std::move(name), device) {}

ValueId ProgramBuilder::input(const std::string& name, const Shape& shape, DType dtype) {
  return program_.add_input(name, TensorType{shape, dtype, program_.device()}, ValueKind::kInput);
}

ValueId ProgramBuilder::param(const std::string& name, const Shape& shape, DType dtype,
                              Initializer init) {
  return program_.add_input(name, TensorType{shape, dtype, program_.device()}, ValueKind::kParam,
                            init);
}

ValueId ProgramBuilder::buffer(const std::string& name, const Shape& shape, DType dtype,
                               Initializer init) {
  return program_.add_input(name, TensorType{shape, dtype, program_.device()}, ValueKind::kBuffer,
                            init);
}

std::string ProgramBuilder::fresh_node_name(const std::string& op) {
  std::string name;
  do {
    name = op + "_" + std::to_string(next_node_++);
  } while (program_.find_node(name) || program_.has_name(name));
  return name;
}

std::vector<ValueId> ProgramBuilder::op(const std::string& op, const std::vector<ValueId>& operands,
                                        const Attributes& attrs, const std::string& name) {
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  std::string node_name = name.empty() ? fresh_node_name(op) : name;
  ops::OpContext context;
  context.node_name = node_name;
  context.op = op;
  context.device = program_.device();
  for (size_t i = 0; i < operands.size(); ++i) {
    GROVE_CHECK(operands[i] >= 0 && operands[i] < static_cast<ValueId>(program_.values().size()),
                "node '", node_name, "' (", op, "): operand ", i,
                " is not a value of this builder (id ", operands[i], ")");
    const Value& value = program_.value(operands[i]);
    context.operand_types.push_back(value.type);
    context.operand_names.push_back(value.name);
  }
  registry.get(op);  // unknown op: a clear error before anything else
  context.attrs = registry.normalize_attrs(context, attrs);
  std::vector<TensorType> types = registry.infer_types(context);
  std::vector<std::string> result_names;
  for (size_t i = 0; i < types.size(); ++i) {
    result_names.push_back(types.size() == 1 ? node_name : node_name + "." + std::to_string(i));
  }
  int32_t index = program_.add_node(node_name, op, operands, context.attrs, result_names, types);
  return program_.node(index).results;
}

ValueId ProgramBuilder::op1(const std::string& op, const std::vector<ValueId>& operands,
                            const Attributes& attrs, const std::string& name) {
  std::vector<ValueId> results = this->op(op, operands, attrs, name);
  GROVE_CHECK(results.size() == 1, "op '", op, "' has ", results.size(),
              " results; use ProgramBuilder::op for multi-result ops");
  return results[0];
}

#define GROVE_BUILDER_UNARY(method, op_name)                           \
  ValueId ProgramBuilder::method(ValueId x, const std::string& name) { \
    return op1(op_name, {x}, {}, name);                                \
  }
#define GROVE_BUILDER_BINARY(method, op_name)                                     \
  ValueId ProgramBuilder::method(ValueId a, ValueId b, const std::string& name) { \
    return op1(op_name, {a, b}, {}, name);                                        \
  }

GROVE_BUILDER_BINARY(add, "add")
GROVE_BUILDER_BINARY(sub, "sub")
GROVE_BUILDER_BINARY(mul, "mul")
GROVE_BUILDER_BINARY(div, "div")
GROVE_BUILDER_BINARY(pow, "pow")
GROVE_BUILDER_BINARY(matmul, "matmul")
GROVE_BUILDER_BINARY(embedding, "embedding")
GROVE_BUILDER_BINARY(cross_entropy, "cross_entropy")
GROVE_BUILDER_BINARY(mse_loss, "mse_loss")
GROVE_BUILDER_BINARY(copy_into, "copy_into")
GROVE_BUILDER_UNARY(neg, "neg")
GROVE_BUILDER_UNARY(exp, "exp")
GROVE_BUILDER_UNARY(log, "log")
GROVE_BUILDER_UNARY(tanh, "tanh")
GROVE_BUILDER_UNARY(sigmoid, "sigmoid")
GROVE_BUILDER_UNARY(relu, "relu")
GROVE_BUILDER_UNARY(gelu, "gelu")
GROVE_BUILDER_UNARY(sqrt, "sqrt")
GROVE_BUILDER_UNARY(rsqrt, "rsqrt")
GROVE_BUILDER_UNARY(nonzero, "nonzero")

#undef GROVE_BUILDER_UNARY
#undef GROVE_BUILDER_BINARY

ValueId ProgramBuilder::where(ValueId condition, ValueId a, ValueId b, const std::string& name) {
  return op1("where", {condition, a, b}, {}, name);
}

ValueId ProgramBuilder::compare(const std::string& op, ValueId a, ValueId b,
                                const std::string& name) {
  GROVE_CHECK(op == "lt" || op == "le" || op == "gt" || op == "ge" || op == "eq" || op == "ne",
              "compare: '", op, "' is not a comparison; use lt, le, gt, ge, eq or ne");
  return op1(op, {a, b}, {}, name);
}

ValueId ProgramBuilder::cast(ValueId x, DType dtype, const std::string& name) {
  return op1("cast", {x}, {{"dtype", std::string(runtime::dtype_name(dtype))}}, name);
}

ValueId ProgramBuilder::full(double value, const Shape& shape, DType dtype,
                             const std::string& name) {
  return op1("full", {},
             {{"value", value},
              {"shape", std::vector<int64_t>(shape)},
              {"dtype", std::string(runtime::dtype_name(dtype))}},
             name);
}

ValueId ProgramBuilder::sum(ValueId x, const std::vector<int64_t>& dims, bool keepdim,
                            const std::string& name) {
  return op1("sum", {x}, {{"dims", dims}, {"keepdim", int64_t{keepdim}}}, name);
}

ValueId ProgramBuilder::mean(ValueId x, const std::vector<int64_t>& dims, bool keepdim,
                             const std::string& name) {
  return op1("mean", {x}, {{"dims", dims}, {"keepdim", int64_t{keepdim}}}, name);
}

ValueId ProgramBuilder::max(ValueId x, const std::vector<int64_t>& dims, bool keepdim,
                            const std::string& name) {
  return op1("max", {x}, {{"dims", dims}, {"keepdim", int64_t{keepdim}}}, name);
}

ValueId ProgramBuilder::softmax(ValueId x, int64_t dim, const std::string& name) {
  return op1("softmax", {x}, {{"dim", dim}}, name);
}

ValueId ProgramBuilder::log_softmax(ValueId x, int64_t dim, const std::string& name) {
  return op1("log_softmax", {x}, {{"dim", dim}}, name);
}

ValueId ProgramBuilder::layer_norm(ValueId x, ValueId weight, ValueId bias, double eps,
                                   const std::string& name) {
  return op1("layer_norm", {x, weight, bias}, {{"eps", eps}}, name);
}

ValueId ProgramBuilder::linear(ValueId x, ValueId weight, ValueId bias, const std::string& name) {
  if (bias == kNoValue) return op1("linear", {x, weight}, {}, name);
  return op1("linear", {x, weight, bias}, {}, name);
}

ValueId ProgramBuilder::reshape(ValueId x, const Shape& shape, const std::string& name) {
  return op1("reshape", {x}, {{"shape", std::vector<int64_t>(shape)}}, name);
}

ValueId ProgramBuilder::transpose(ValueId x, int64_t dim0, int64_t dim1, const std::string& name) {
  return op1("transpose", {x}, {{"dim0", dim0}, {"dim1", dim1}}, name);
}

ValueId ProgramBuilder::permute(ValueId x, const std::vector<int64_t>& order,
                                const std::string& name) {
  return op1("permute", {x}, {{"order", order}}, name);
}

ValueId ProgramBuilder::slice(ValueId x, int64_t dim, int64_t start, int64_t end,
                              const std::string& name) {
  return op1("slice", {x}, {{"dim", dim}, {"start", start}, {"end", end}}, name);
}

ValueId ProgramBuilder::concat(const std::vector<ValueId>& xs, int64_t dim,
                               const std::string& name) {
  return op1("concat", xs, {{"dim", dim}}, name);
}

ValueId ProgramBuilder::dropout(ValueId x, ValueId seed, ValueId offset, double p,
                                const std::string& name) {
  return op1("dropout", {x, seed, offset}, {{"p", p}}, name);
}

ValueId ProgramBuilder::dropout(ValueId x, double p, const std::string& name) {
  return add_generator_dropout(program_, x, p, name.empty() ? fresh_node_name("dropout") : name);
}

std::vector<ValueId> ProgramBuilder::sgd_momentum_update(ValueId param, ValueId grad,
                                                         ValueId momentum_buffer, ValueId lr,
                                                         ValueId momentum, ValueId weight_decay,
                                                         const std::string& name) {
  return op("sgd_momentum_update", {param, grad, momentum_buffer, lr, momentum, weight_decay}, {},
            name);
}

std::vector<ValueId> ProgramBuilder::adamw_update(ValueId param, ValueId grad, ValueId exp_avg,
                                                  ValueId exp_avg_sq, ValueId lr, ValueId beta1,
                                                  ValueId beta2, ValueId eps, ValueId weight_decay,
                                                  ValueId step, const std::string& name) {
  return op("adamw_update",
            {param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step}, {},
            name);
}

ValueId ProgramBuilder::print(ValueId x, const std::string& message, const std::string& name) {
  return op1("print", {x}, {{"message", message}}, name);
}

void ProgramBuilder::output(ValueId value) { program_.add_output(value); }

Program ProgramBuilder::build() {
  program_.verify();
  Program built = std::move(program_);
  program_ = Program(built.name(), built.device());
  next_node_ = 0;
  return built;
}

}  // namespace grove::compiler::ir
