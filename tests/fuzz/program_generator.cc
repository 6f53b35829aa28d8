#include "tests/fuzz/program_generator.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace grove::fuzz {

namespace {

using compiler::ir::Program;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using compiler::ir::ValueKind;
using runtime::DType;
using runtime::Shape;

bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    int64_t x = a[a.size() - 1 - i];
    int64_t y = b[b.size() - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// One generation run: the builder, the rng and the f32 values nodes may read.
class Generator {
 public:
  Generator(uint64_t seed, runtime::Device device, const GeneratorOptions& options)
      : rng_(seed), options_(options), builder_("fuzz_" + std::to_string(seed), device) {}

  Program run() {
    int inputs = pick(1, 3);
    for (int i = 0; i < inputs; ++i) live_.push_back(new_input(random_shape()));
    if (options_.gradients) live_.push_back(new_param(random_shape()));
    int nodes = pick(options_.min_nodes, options_.max_nodes);
    int sync_at = chance(options_.host_sync_probability) ? pick(1, std::max(1, nodes - 2)) : -1;
    for (int n = 0; n < nodes; ++n) {
      if (n == sync_at) add_host_sync();
      for (int attempt = 0; attempt < 8; ++attempt) {
        try {
          if (add_random_node()) break;
        } catch (const Error&) {
          // The registry rejected the combination; try another.
        }
      }
    }
    // Outputs: the last value and a few others (never every value: some die).
    std::set<ValueId> outputs = {live_.back()};
    int extra = pick(0, 2);
    for (int i = 0; i < extra; ++i) outputs.insert(any_live());
    for (ValueId value : outputs) builder_.output(value);
    for (ValueId value : extra_outputs_) builder_.output(value);
    if (options_.gradients) add_projected_loss(outputs);
    return builder_.build();
  }

 private:
  int pick(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  ValueId any_live() {
    return live_[static_cast<size_t>(pick(0, static_cast<int>(live_.size()) - 1))];
  }
  std::string fresh(const std::string& stem) { return stem + std::to_string(next_name_++); }

  Shape random_shape() {
    Shape shape(static_cast<size_t>(pick(1, options_.max_rank)));
    for (int64_t& dim : shape) dim = pick(1, options_.max_dim);
    return shape;
  }
  // A shape that broadcasts against `shape`: a suffix with some dims set to 1.
  Shape broadcast_partner(const Shape& shape) {
    size_t keep = static_cast<size_t>(pick(0, static_cast<int>(shape.size())));
    Shape partner(shape.end() - static_cast<std::ptrdiff_t>(keep), shape.end());
    for (int64_t& dim : partner) {
      if (chance(0.3)) dim = 1;
    }
    return partner;
  }
  ValueId constant(double value) { return builder_.full(value, {}, options_.dtype); }
  ValueId new_input(const Shape& shape) {
    return builder_.input(fresh("x"), shape, options_.dtype);
  }
  ValueId new_param(const Shape& shape) {
    return builder_.param(fresh("p"), shape, options_.dtype,
                          compiler::ir::normal_init(0.5, static_cast<uint64_t>(pick(1, 1000))));
  }
  ValueId new_buffer(const Shape& shape) {
    return builder_.buffer(fresh("b"), shape, options_.dtype,
                           compiler::ir::uniform_init(-1, 1, static_cast<uint64_t>(pick(1, 1000))));
  }
  // A second operand for a binary op on `a`: a live value that broadcasts, a
  // new input or param of a broadcasting shape, or a scalar constant.
  ValueId partner_of(ValueId a) {
    const Shape& shape = builder_.type(a).shape;
    int mode = pick(0, 3);
    if (mode == 0) {
      std::vector<ValueId> candidates;
      for (ValueId v : live_) {
        if (broadcastable(builder_.type(v).shape, shape)) candidates.push_back(v);
      }
      return candidates[static_cast<size_t>(pick(0, static_cast<int>(candidates.size()) - 1))];
    }
    if (mode == 1) return new_input(broadcast_partner(shape));
    if (mode == 2) return new_param(broadcast_partner(shape));
    return constant(std::uniform_real_distribution<double>(-2, 2)(rng_));
  }
  int64_t random_dim(ValueId v) {
    return pick(0, static_cast<int>(builder_.type(v).shape.size()) - 1);
  }

  // loss = sum over the outputs o of sum(o * projection_o), the last output.
  void add_projected_loss(const std::set<ValueId>& outputs) {
    ValueId loss = compiler::ir::kNoValue;
    for (ValueId value : outputs) {
      const Shape& shape = builder_.type(value).shape;
      ValueId projection =
          builder_.buffer(fresh("projection"), shape, options_.dtype,
                          compiler::ir::normal_init(1, static_cast<uint64_t>(pick(1, 1000))));
      ValueId term = builder_.sum(builder_.mul(value, projection), {});
      loss = loss == compiler::ir::kNoValue ? term : builder_.add(loss, term);
    }
    builder_.output(loss);
  }

  void add_host_sync() {
    if (live_.empty() || !chance(0.9)) return;
    ValueId v = any_live();
    ValueId mask = builder_.compare("gt", v, constant(0.0));
    extra_outputs_.push_back(builder_.nonzero(mask));
  }

  bool add_random_node() {
    ValueId a = any_live();
    const Shape shape = builder_.type(a).shape;
    ValueId result = compiler::ir::kNoValue;
    switch (pick(0, 14)) {
      case 0: {  // unary math (domains kept valid where it is cheap)
        static const std::vector<std::string> kUnary = {"neg",  "exp",  "tanh",  "sigmoid", "relu",
                                                        "gelu", "sqrt", "rsqrt", "log"};
        const std::string& op = kUnary[static_cast<size_t>(pick(0, 8))];
        ValueId operand = a;
        if (op == "sqrt" || op == "rsqrt" || op == "log") {
          operand = builder_.add(builder_.mul(a, a), constant(0.5));
        } else if (op == "exp") {
          operand = builder_.tanh(a);
        }
        result = builder_.op1(op, {operand});
        break;
      }
      case 1:
      case 2: {  // binary arithmetic with broadcasting
        static const std::vector<std::string> kBinary = {"add", "sub", "mul", "div"};
        const std::string& op = kBinary[static_cast<size_t>(pick(0, 3))];
        ValueId b = partner_of(a);
        const bool swapped = chance(0.5);
        // A divisor of x * x + 1, whichever side it is: a divisor that can be
        // exactly 0 (a relu's or a dropout's zero) made an infinity the
        // forward hid (tanh) and an analytic gradient of 0 * inf = NaN, as
        // PyTorch's autograd gives, which the numeric f64 oracle does not
        // (the gradient cases of seeds 107789 and 201935).
        const ValueId left = swapped ? b : a;
        ValueId right = swapped ? a : b;
        if (op == "div") right = builder_.add(builder_.mul(right, right), constant(1.0));
        result = builder_.op1(op, {left, right});
        break;
      }
      case 3: {  // where(compare) and pow of a positive base
        if (chance(0.5)) {
          static const std::vector<std::string> kCompare = {"lt", "le", "gt", "ge", "eq", "ne"};
          ValueId b = partner_of(a);
          ValueId condition = builder_.compare(kCompare[static_cast<size_t>(pick(0, 5))], a, b);
          result = builder_.where(condition, a, b);
        } else {
          ValueId base = builder_.add(builder_.mul(a, a), constant(0.25));
          result = builder_.pow(base, constant(pick(0, 1) ? 0.5 : 2.0));
        }
        break;
      }
      case 4: {  // through f16 or bf16 and back
        DType low = chance(0.5) ? DType::kF16 : DType::kBF16;
        if (options_.gradients) return false;  // f16 rounding would swamp finite differences
        result = builder_.cast(builder_.cast(a, low), options_.dtype);
        break;
      }
      case 5: {  // reductions
        std::vector<int64_t> dims = {random_dim(a)};
        bool keepdim = chance(0.5);
        if (shape.size() == 1 && !keepdim) keepdim = true;  // keep rank >= 1
        int which = pick(0, 2);
        result = which == 0   ? builder_.sum(a, dims, keepdim)
                 : which == 1 ? builder_.mean(a, dims, keepdim)
                              : builder_.max(a, dims, keepdim);
        break;
      }
      case 6:
        result = chance(0.5) ? builder_.softmax(a, -1) : builder_.log_softmax(a, -1);
        break;
      case 7: {
        Shape last = {shape.back()};
        result = builder_.layer_norm(a, new_param(last), new_param(last));
        break;
      }
      case 8: {                                           // matmul / linear against a param
        if (options_.dtype == DType::kF64) return false;  // GEMMs take no f64
        int64_t n = pick(1, options_.max_dim);
        if (chance(0.5)) {
          result = builder_.matmul(a, new_param({shape.back(), n}));
        } else {
          ValueId bias = chance(0.5) ? new_param({n}) : compiler::ir::kNoValue;
          result = builder_.linear(a, new_param({n, shape.back()}), bias);
        }
        break;
      }
      case 9: {  // views
        int which = pick(0, 3);
        if (which == 0 && shape.size() >= 2) {
          result = builder_.transpose(a, 0, static_cast<int64_t>(shape.size()) - 1);
        } else if (which == 1 && shape.size() == 3) {
          result = builder_.permute(a, {2, 0, 1});
        } else if (which == 2) {
          int64_t dim = random_dim(a);
          int64_t size = shape[static_cast<size_t>(dim)];
          int64_t start = pick(0, static_cast<int>(size) - 1);
          result = builder_.slice(a, dim, start,
                                  pick(static_cast<int>(start) + 1, static_cast<int>(size)));
        } else {
          result = chance(0.5) ? builder_.reshape(a, {-1})
                               : builder_.reshape(a, {1, runtime::shape_numel(shape)});
        }
        break;
      }
      case 10: {  // concat with a value of the same shape
        std::vector<ValueId> same;
        for (ValueId v : live_) {
          if (builder_.type(v).shape == shape) same.push_back(v);
        }
        ValueId b = same[static_cast<size_t>(pick(0, static_cast<int>(same.size()) - 1))];
        result = builder_.concat({a, b}, random_dim(a));
        break;
      }
      case 11: {  // embedding of token ids
        Shape ids_shape = {pick(1, options_.max_dim)};
        if (chance(0.5)) ids_shape.push_back(pick(1, 3));
        ValueId ids = builder_.input(fresh("ids"), ids_shape, DType::kI64);
        result = builder_.embedding(new_param({kTokenRange, pick(1, options_.max_dim)}), ids);
        break;
      }
      case 12:
      case 13: {                   // in-place update of a buffer or an input (type (d) mutation)
        if (options_.gradients) {  // no mutations to differentiate: more dropouts instead
          result = builder_.dropout(a, chance(0.5) ? 0.5 : 0.1);
          break;
        }
        if (!chance(options_.mutation_probability)) return false;
        ValueId destination;
        if (chance(0.6)) {
          destination = new_buffer(shape);
        } else {
          destination = new_input(shape);
        }
        ValueId source = a;
        if (chance(0.5)) source = builder_.add(destination, a);
        result = builder_.copy_into(destination, source);
        break;
      }
      case 14:  // dropout drawing from the device's implicit generator
        if (!runtime::is_floating(builder_.type(a).dtype)) return false;
        result = builder_.dropout(a, chance(0.5) ? 0.5 : 0.1);
        break;
    }
    if (result == compiler::ir::kNoValue) return false;
    live_.push_back(result);
    return true;
  }

  std::mt19937_64 rng_;
  GeneratorOptions options_;
  ProgramBuilder builder_;
  std::vector<ValueId> live_;
  std::vector<ValueId> extra_outputs_;
  int next_name_ = 0;
};

}  // namespace

Program generate_program(uint64_t seed, runtime::Device device, const GeneratorOptions& options) {
  return Generator(seed, device, options).run();
}

Program rewrite_program(const Program& program, const std::set<size_t>& dropped_outputs,
                        const std::map<int32_t, size_t>& bypassed) {
  const auto& nodes = program.nodes();
  // Which value each value reads as after the bypasses.
  std::vector<ValueId> source(program.values().size());
  for (size_t v = 0; v < source.size(); ++v) source[v] = static_cast<ValueId>(v);
  for (size_t n = 0; n < nodes.size(); ++n) {
    auto it = bypassed.find(static_cast<int32_t>(n));
    if (it == bypassed.end()) continue;
    const auto& node = nodes[n];
    GROVE_CHECK(node.results.size() == 1 && it->second < node.operands.size(),
                "rewrite_program: node ", node.name, " cannot be bypassed");
    ValueId operand = source[static_cast<size_t>(node.operands[it->second])];
    GROVE_CHECK(program.value(operand).type == program.value(node.results[0]).type,
                "rewrite_program: node ", node.name, " changes the type");
    source[static_cast<size_t>(node.results[0])] = operand;
  }
  std::vector<ValueId> outputs;
  for (size_t o = 0; o < program.outputs().size(); ++o) {
    if (dropped_outputs.count(o) == 0)
      outputs.push_back(source[static_cast<size_t>(program.outputs()[o])]);
  }
  GROVE_CHECK(!outputs.empty(), "rewrite_program: no outputs left");
  // Nodes some output depends on, walking backwards.
  std::vector<bool> needed_value(program.values().size(), false);
  for (ValueId v : outputs) needed_value[static_cast<size_t>(v)] = true;
  std::vector<bool> keep(nodes.size(), false);
  for (size_t n = nodes.size(); n-- > 0;) {
    if (bypassed.count(static_cast<int32_t>(n)) != 0) continue;
    bool needed = false;
    for (ValueId r : nodes[n].results) needed = needed || needed_value[static_cast<size_t>(r)];
    if (!needed) continue;
    keep[n] = true;
    for (ValueId operand : nodes[n].operands) {
      if (operand != compiler::ir::kNoValue)
        needed_value[static_cast<size_t>(source[static_cast<size_t>(operand)])] = true;
    }
  }
  Program result(program.name(), program.device());
  std::vector<ValueId> mapped(program.values().size(), compiler::ir::kNoValue);
  for (ValueId input : program.inputs()) {
    const auto& value = program.value(input);
    mapped[static_cast<size_t>(input)] =
        result.add_input(value.name, value.type, value.kind, value.initializer);
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!keep[n]) continue;
    const auto& node = nodes[n];
    std::vector<ValueId> operands;
    for (ValueId operand : node.operands) {
      operands.push_back(operand == compiler::ir::kNoValue
                             ? compiler::ir::kNoValue
                             : mapped[static_cast<size_t>(source[static_cast<size_t>(operand)])]);
    }
    std::vector<std::string> names;
    std::vector<compiler::ir::TensorType> types;
    for (ValueId r : node.results) {
      names.push_back(program.value(r).name);
      types.push_back(program.value(r).type);
    }
    int32_t index = result.add_node(node.name, node.op, operands, node.attrs, names, types);
    for (size_t r = 0; r < node.results.size(); ++r) {
      mapped[static_cast<size_t>(node.results[r])] = result.node(index).results[r];
    }
  }
  for (ValueId v : outputs) result.add_output(mapped[static_cast<size_t>(v)]);
  result.verify();
  return result;
}

}  // namespace grove::fuzz
