// ProgramBuilder builds a Program with calls that read like the model:
//
//   ProgramBuilder b("mlp", device);
//   ValueId x = b.input("x", {batch, 512});
//   ValueId w = b.param("fc0.weight", {512, 512}, DType::kF32, normal(0.02, 1));
//   ValueId h = b.gelu(b.linear(x, w, bias, "fc0"));
//   b.output(h);
//   Program program = b.build();  // verifies
//
// Every op method infers the result type through the OpRegistry right away,
// so a shape error is thrown at the call that made it, naming the node. The
// optional trailing `name` names the node (and its single result); by
// default nodes are named "<op>_<n>".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::ir {

Initializer zeros_init();
Initializer ones_init();
Initializer constant_init(double value);
Initializer normal_init(double std, uint64_t seed, double mean = 0);
Initializer uniform_init(double low, double high, uint64_t seed);
Initializer tril_init();

class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::string name = "program", Device device = runtime::kCpuDevice);

  // Program inputs, in call order.
  ValueId input(const std::string& name, const Shape& shape, DType dtype = DType::kF32);
  ValueId param(const std::string& name, const Shape& shape, DType dtype, Initializer init);
  ValueId buffer(const std::string& name, const Shape& shape, DType dtype, Initializer init);

  // Any registered op; returns all results.
  std::vector<ValueId> op(const std::string& op, const std::vector<ValueId>& operands,
                          const Attributes& attrs = {}, const std::string& name = "");
  // An op with exactly one result.
  ValueId op1(const std::string& op, const std::vector<ValueId>& operands,
              const Attributes& attrs = {}, const std::string& name = "");

  // Elementwise (broadcasting; operands of one dtype).
  ValueId add(ValueId a, ValueId b, const std::string& name = "");
  ValueId sub(ValueId a, ValueId b, const std::string& name = "");
  ValueId mul(ValueId a, ValueId b, const std::string& name = "");
  ValueId div(ValueId a, ValueId b, const std::string& name = "");
  ValueId pow(ValueId a, ValueId b, const std::string& name = "");
  ValueId neg(ValueId x, const std::string& name = "");
  ValueId exp(ValueId x, const std::string& name = "");
  ValueId log(ValueId x, const std::string& name = "");
  ValueId tanh(ValueId x, const std::string& name = "");
  ValueId sigmoid(ValueId x, const std::string& name = "");
  ValueId relu(ValueId x, const std::string& name = "");
  ValueId gelu(ValueId x, const std::string& name = "");  // tanh approximation
  ValueId sqrt(ValueId x, const std::string& name = "");
  ValueId rsqrt(ValueId x, const std::string& name = "");
  ValueId where(ValueId condition, ValueId a, ValueId b, const std::string& name = "");
  ValueId compare(const std::string& op, ValueId a, ValueId b,
                  const std::string& name = "");  // lt le gt ge eq ne
  ValueId cast(ValueId x, DType dtype, const std::string& name = "");
  // A constant tensor (shape {} for a scalar that broadcasts).
  ValueId full(double value, const Shape& shape = {}, DType dtype = DType::kF32,
               const std::string& name = "");

  // Reductions and normalizations.
  ValueId sum(ValueId x, const std::vector<int64_t>& dims, bool keepdim = false,
              const std::string& name = "");
  ValueId mean(ValueId x, const std::vector<int64_t>& dims, bool keepdim = false,
               const std::string& name = "");
  ValueId max(ValueId x, const std::vector<int64_t>& dims, bool keepdim = false,
              const std::string& name = "");
  ValueId softmax(ValueId x, int64_t dim = -1, const std::string& name = "");
  ValueId log_softmax(ValueId x, int64_t dim = -1, const std::string& name = "");
  ValueId layer_norm(ValueId x, ValueId weight, ValueId bias, double eps = 1e-5,
                     const std::string& name = "");

  // Matmuls. linear computes x @ weight^T + bias; bias may be kNoValue.
  ValueId matmul(ValueId a, ValueId b, const std::string& name = "");
  ValueId linear(ValueId x, ValueId weight, ValueId bias, const std::string& name = "");

  // Views and data movement.
  ValueId reshape(ValueId x, const Shape& shape,
                  const std::string& name = "");  // -1 infers, 0 copies
  ValueId transpose(ValueId x, int64_t dim0, int64_t dim1, const std::string& name = "");
  ValueId permute(ValueId x, const std::vector<int64_t>& order, const std::string& name = "");
  ValueId slice(ValueId x, int64_t dim, int64_t start, int64_t end, const std::string& name = "");
  ValueId concat(const std::vector<ValueId>& xs, int64_t dim, const std::string& name = "");
  ValueId embedding(ValueId table, ValueId ids, const std::string& name = "");

  // Losses, randomness, updates, special ops.
  ValueId cross_entropy(ValueId logits, ValueId labels, const std::string& name = "");
  ValueId mse_loss(ValueId prediction, ValueId target, const std::string& name = "");
  ValueId dropout(ValueId x, ValueId seed, ValueId offset, double p, const std::string& name = "");
  // dropout drawing from the device's implicit generator (Note [Implicit
  // generator], generator_state.h).
  ValueId dropout(ValueId x, double p, const std::string& name = "");
  ValueId copy_into(ValueId destination, ValueId source, const std::string& name = "");
  // Returns {new param, new momentum buffer}.
  std::vector<ValueId> sgd_momentum_update(ValueId param, ValueId grad, ValueId momentum_buffer,
                                           ValueId lr, ValueId momentum, ValueId weight_decay,
                                           const std::string& name = "");
  // Returns {new param, new exp_avg, new exp_avg_sq}. `step` is the 1-based
  // step count as an f32 scalar.
  std::vector<ValueId> adamw_update(ValueId param, ValueId grad, ValueId exp_avg,
                                    ValueId exp_avg_sq, ValueId lr, ValueId beta1, ValueId beta2,
                                    ValueId eps, ValueId weight_decay, ValueId step,
                                    const std::string& name = "");
  ValueId nonzero(ValueId x, const std::string& name = "");
  ValueId print(ValueId x, const std::string& message, const std::string& name = "");

  void output(ValueId value);
  const TensorType& type(ValueId value) const { return program_.value(value).type; }
  const Program& program() const { return program_; }
  // Verifies and hands over the program; the builder is left empty.
  Program build();

 private:
  std::string fresh_node_name(const std::string& op);

  Program program_;
  int next_node_ = 0;
};

}  // namespace grove::compiler::ir
