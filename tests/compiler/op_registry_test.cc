#include "compiler/ops/op_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/ir/builder.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/error.h"

namespace grove::compiler::ops {
namespace {

using codegen::ExprOp;
using ir::DType;
using ir::Shape;

OpContext context_of(const std::string& op, std::vector<TensorType> operands,
                     Attributes attrs = {}) {
  OpContext context;
  context.node_name = "n";
  context.op = op;
  context.operand_types = std::move(operands);
  for (size_t i = 0; i < context.operand_types.size(); ++i) {
    context.operand_names.push_back("v" + std::to_string(i));
  }
  context.attrs = OpRegistry::global().normalize_attrs(context, attrs);
  return context;
}

TensorType t(Shape shape, DType dtype = DType::kF32) {
  return TensorType{std::move(shape), dtype, {}};
}

Shape infer_shape(const std::string& op, std::vector<TensorType> operands, Attributes attrs = {}) {
  return OpRegistry::global().infer_types(context_of(op, std::move(operands), attrs))[0].shape;
}

TEST(OpRegistry, RegistersEveryOpOfTheDesign) {
  for (const char* op : {"add",          "sub",
                         "mul",          "div",
                         "neg",          "exp",
                         "log",          "tanh",
                         "sigmoid",      "relu",
                         "gelu",         "sqrt",
                         "rsqrt",        "pow",
                         "where",        "lt",
                         "le",           "gt",
                         "ge",           "eq",
                         "ne",           "cast",
                         "full",         "sum",
                         "mean",         "max",
                         "softmax",      "log_softmax",
                         "layer_norm",   "matmul",
                         "linear",       "reshape",
                         "transpose",    "permute",
                         "slice",        "concat",
                         "embedding",    "cross_entropy",
                         "mse_loss",     "dropout",
                         "copy_into",    "sgd_momentum_update",
                         "adamw_update", "nonzero",
                         "print"}) {
    EXPECT_NE(OpRegistry::global().find(op), nullptr) << op;
  }
  EXPECT_THROW(OpRegistry::global().get("conv2d"), Error);
  OpDef duplicate;
  duplicate.name = "add";
  duplicate.infer = [](const OpContext&) { return std::vector<TensorType>{}; };
  OpRegistry local;
  local.add(duplicate);
  EXPECT_THROW(local.add(duplicate), Error) << "one definition per op";
}

TEST(OpRegistry, BroadcastingFollowsNumpyRules) {
  EXPECT_EQ(infer_shape("add", {t({2, 3}), t({})}), (Shape{2, 3}));
  EXPECT_EQ(infer_shape("add", {t({3, 1}), t({1, 4})}), (Shape{3, 4}));
  EXPECT_EQ(infer_shape("mul", {t({2, 1, 5}), t({4, 1})}), (Shape{2, 4, 5}));
  EXPECT_EQ(infer_shape("sub", {t({0}), t({1})}), (Shape{0}));
  EXPECT_EQ(infer_shape("where", {t({4, 1}, DType::kBool), t({3}), t({})}), (Shape{4, 3}));
  EXPECT_EQ(OpRegistry::global().infer_types(context_of("lt", {t({2}), t({2})}))[0].dtype,
            DType::kBool);
}

TEST(OpRegistry, BroadcastFailureNamesNodeOperandsAndDimension) {
  try {
    infer_shape("add", {t({2, 3}), t({4, 3})});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("node 'n' (add)"), std::string::npos) << message;
    EXPECT_NE(message.find("operand 0 'v0' f32[2, 3]"), std::string::npos) << message;
    EXPECT_NE(message.find("operand 1 'v1' f32[4, 3]"), std::string::npos) << message;
    EXPECT_NE(message.find("dimension 0"), std::string::npos) << message;
  }
}

TEST(OpRegistry, DTypeRulesAreEnforced) {
  EXPECT_THROW(infer_shape("add", {t({2}), t({2}, DType::kBF16)}), DTypeError);
  EXPECT_THROW(infer_shape("exp", {t({2}, DType::kI64)}), DTypeError);
  EXPECT_THROW(infer_shape("where", {t({2}), t({2}), t({2})}), DTypeError);
  EXPECT_THROW(infer_shape("embedding", {t({4, 2}), t({3})}), DTypeError);
  EXPECT_EQ(infer_shape("gelu", {t({2}, DType::kBF16)}), (Shape{2}));
  EXPECT_EQ(infer_shape("add", {t({2}, DType::kI32), t({2}, DType::kI32)}), (Shape{2}));
}

TEST(OpRegistry, MatmulAndLinearShapes) {
  EXPECT_EQ(infer_shape("matmul", {t({2, 1, 3, 4}), t({5, 4, 6})}), (Shape{2, 5, 3, 6}));
  EXPECT_EQ(infer_shape("matmul", {t({3, 4}), t({4, 6})}), (Shape{3, 6}));
  EXPECT_THROW(infer_shape("matmul", {t({3, 4}), t({5, 6})}), ShapeError);
  EXPECT_THROW(infer_shape("matmul", {t({2, 3, 4}), t({3, 4, 6})}), ShapeError);
  EXPECT_EQ(infer_shape("linear", {t({2, 7, 8}), t({16, 8}), t({16})}), (Shape{2, 7, 16}));
  EXPECT_THROW(infer_shape("linear", {t({2, 8}), t({8, 16})}), ShapeError);
  EXPECT_THROW(infer_shape("linear", {t({2, 8}), t({16, 8}), t({8})}), ShapeError);
}

TEST(OpRegistry, ViewShapes) {
  EXPECT_EQ(infer_shape("reshape", {t({2, 3, 4})}, {{"shape", std::vector<int64_t>{0, -1}}}),
            (Shape{2, 12}));
  EXPECT_THROW(infer_shape("reshape", {t({2, 3})}, {{"shape", std::vector<int64_t>{4, -1}}}),
               ShapeError);
  EXPECT_THROW(infer_shape("reshape", {t({2, 3})}, {{"shape", std::vector<int64_t>{-1, -1}}}),
               ShapeError);
  EXPECT_EQ(infer_shape("permute", {t({2, 3, 4})}, {{"order", std::vector<int64_t>{2, 0, 1}}}),
            (Shape{4, 2, 3}));
  EXPECT_THROW(infer_shape("permute", {t({2, 3, 4})}, {{"order", std::vector<int64_t>{0, 0, 1}}}),
               ShapeError);
  EXPECT_EQ(infer_shape("transpose", {t({2, 3, 4})}, {{"dim0", int64_t{-1}}, {"dim1", int64_t{0}}}),
            (Shape{4, 3, 2}));
  EXPECT_EQ(infer_shape("slice", {t({10, 2})},
                        {{"dim", int64_t{0}}, {"start", int64_t{-4}}, {"end", int64_t{100}}}),
            (Shape{4, 2}));
  EXPECT_EQ(infer_shape("slice", {t({10})},
                        {{"dim", int64_t{0}}, {"start", int64_t{7}}, {"end", int64_t{3}}}),
            (Shape{0}));
  EXPECT_THROW(infer_shape("slice", {t({10})}, {{"dim", int64_t{1}}, {"end", int64_t{3}}}),
               ShapeError);
  EXPECT_EQ(infer_shape("concat", {t({2, 3}), t({2, 5})}, {{"dim", int64_t{-1}}}), (Shape{2, 8}));
  EXPECT_THROW(infer_shape("concat", {t({2, 3}), t({3, 5})}, {{"dim", int64_t{1}}}), ShapeError);
}

TEST(OpRegistry, ReductionAndLossShapes) {
  EXPECT_EQ(infer_shape("sum", {t({2, 3, 4})}, {{"dims", std::vector<int64_t>{0, -1}}}),
            (Shape{3}));
  EXPECT_EQ(infer_shape("mean", {t({2, 3, 4})},
                        {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}),
            (Shape{2, 1, 4}));
  EXPECT_EQ(infer_shape("max", {t({2, 3})}), (Shape{}));
  EXPECT_THROW(infer_shape("sum", {t({2, 3})}, {{"dims", std::vector<int64_t>{1, 1}}}), ShapeError);
  EXPECT_EQ(infer_shape("cross_entropy", {t({2, 5, 7}), t({2, 5}, DType::kI64)}), (Shape{}));
  EXPECT_THROW(infer_shape("cross_entropy", {t({2, 7}), t({3}, DType::kI64)}), ShapeError);
  EXPECT_EQ(infer_shape("layer_norm", {t({2, 8}), t({8}), t({8})}), (Shape{2, 8}));
  EXPECT_THROW(infer_shape("layer_norm", {t({2, 8}), t({4}), t({8})}), ShapeError);
  EXPECT_EQ(infer_shape("nonzero", {t({2, 3})}), (Shape{ir::kDynamicDim, 2}));
  EXPECT_THROW(infer_shape("exp", {t({ir::kDynamicDim, 2})}), ShapeError);
}

TEST(OpRegistry, AttributesAreNormalizedAndChecked) {
  OpContext context = context_of("softmax", {t({2, 3})});
  EXPECT_EQ(context.attrs.get_int("dim"), -1);
  EXPECT_THROW(context_of("softmax", {t({2, 3})}, {{"axis", int64_t{1}}}), Error);
  EXPECT_THROW(context_of("softmax", {t({2, 3})}, {{"dim", 1.5}}), Error);
  EXPECT_THROW(context_of("reshape", {t({2, 3})}), Error);  // shape is required
  EXPECT_EQ(context_of("layer_norm", {}, {{"eps", int64_t{1}}}).attrs.get_float("eps"), 1.0);
  EXPECT_THROW(OpRegistry::global().infer_types(context_of("add", {t({2})})), Error);
}

TEST(OpRegistry, EffectsDescribeMutationAndAliasing) {
  const OpRegistry& registry = OpRegistry::global();
  EXPECT_EQ(registry.get("copy_into").effects.mutated_operands, (std::vector<int>{0}));
  EXPECT_EQ(registry.get("sgd_momentum_update").effects.mutated_operands, (std::vector<int>{0, 2}));
  EXPECT_EQ(registry.get("adamw_update").effects.mutated_operands, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(registry.get("adamw_update").effects.result_aliases,
            (std::vector<std::optional<int>>{0, 2, 3}));
  for (const char* view : {"reshape", "transpose", "permute", "slice"}) {
    EXPECT_EQ(registry.get(view).kind, OpKind::kView) << view;
    EXPECT_EQ(registry.get(view).effects.result_aliases, (std::vector<std::optional<int>>{0}));
    EXPECT_TRUE(registry.get(view).effects.mutated_operands.empty());
  }
  EXPECT_TRUE(registry.get("add").effects.mutated_operands.empty());
  EXPECT_TRUE(registry.get("add").effects.result_aliases.empty());
  EXPECT_TRUE(registry.get("print").effects.host_side_effect);
}

TEST(OpRegistry, GraphSafetyAndKinds) {
  const OpRegistry& registry = OpRegistry::global();
  for (ExecMode mode : {ExecMode::kInference, ExecMode::kTraining}) {
    EXPECT_EQ(registry.get("nonzero").safety(mode), GraphSafety::kNeedsHostSync);
    EXPECT_EQ(registry.get("print").safety(mode), GraphSafety::kHostOnly);
    EXPECT_EQ(registry.get("dropout").safety(mode), GraphSafety::kCapturable);
    EXPECT_EQ(registry.get("matmul").safety(mode), GraphSafety::kCapturable);
  }
  for (const std::string& name : registry.op_names()) {
    const OpDef& def = registry.get(name);
    if (def.kind == OpKind::kElementwise || def.kind == OpKind::kCopyUpdate) {
      EXPECT_TRUE(static_cast<bool>(def.elementwise_expr)) << name;
    }
    if (def.kind == OpKind::kReduction) {
      EXPECT_TRUE(def.reduction_plan && def.reduction_expr) << name;
    }
    EXPECT_FALSE(static_cast<bool>(def.gradient)) << name << ": gradients come with autodiff";
  }
  EXPECT_EQ(registry.get("linear").kind, OpKind::kMatmul);
  EXPECT_EQ(registry.get("embedding").kind, OpKind::kGather);
  EXPECT_EQ(registry.get("dropout").kind, OpKind::kRandom);
}

// A tiny evaluator of the KernelSpec exprs the hooks build, in double, so the
// hooks can be checked against the reference interpreter without codegen.
struct ExprEvaluator {
  const codegen::KernelSpec& spec;
  std::vector<double> loads;    // per input, for the current element
  std::vector<int64_t> index;   // iteration index
  std::vector<double> reduced;  // per reduction

  double eval(int id) const {
    const codegen::Expr& e = spec.exprs.at(static_cast<size_t>(id));
    auto arg = [&](size_t k) { return eval(e.operands.at(k)); };
    switch (e.op) {
      case ExprOp::kLoad:
        return loads.at(static_cast<size_t>(e.input));
      case ExprOp::kConstant:
        return e.constant;
      case ExprOp::kReduced:
        return reduced.at(static_cast<size_t>(e.reduction));
      case ExprOp::kIndex:
        return static_cast<double>(index.at(static_cast<size_t>(e.input)));
      case ExprOp::kNeg:
        return -arg(0);
      case ExprOp::kExp:
        return std::exp(arg(0));
      case ExprOp::kLog:
        return std::log(arg(0));
      case ExprOp::kTanh:
        return std::tanh(arg(0));
      case ExprOp::kSigmoid:
        return 1 / (1 + std::exp(-arg(0)));
      case ExprOp::kSqrt:
        return std::sqrt(arg(0));
      case ExprOp::kRsqrt:
        return 1 / std::sqrt(arg(0));
      case ExprOp::kAdd:
        return arg(0) + arg(1);
      case ExprOp::kSub:
        return arg(0) - arg(1);
      case ExprOp::kMul:
        return arg(0) * arg(1);
      case ExprOp::kDiv:
        return arg(0) / arg(1);
      case ExprOp::kPow:
        return std::pow(arg(0), arg(1));
      case ExprOp::kMax:
        return std::max(arg(0), arg(1));
      case ExprOp::kLt:
        return arg(0) < arg(1);
      case ExprOp::kLe:
        return arg(0) <= arg(1);
      case ExprOp::kGt:
        return arg(0) > arg(1);
      case ExprOp::kGe:
        return arg(0) >= arg(1);
      case ExprOp::kEq:
        return arg(0) == arg(1);
      case ExprOp::kNe:
        return arg(0) != arg(1);
      case ExprOp::kWhere:
        return arg(0) != 0 ? arg(1) : arg(2);
      case ExprOp::kCast:
        return e.dtype == DType::kF32 ? arg(0) : std::trunc(arg(0));
      default:
        ADD_FAILURE() << "evaluator lacks expr op " << static_cast<int>(e.op);
        return NAN;
    }
  }
};

std::vector<int> load_exprs(codegen::KernelBuilder& emitter, const std::vector<TensorType>& types) {
  std::vector<int> loads;
  for (size_t i = 0; i < types.size(); ++i) {
    codegen::Expr load;
    load.op = ExprOp::kLoad;
    load.dtype = types[i].dtype == DType::kF32 ? DType::kF32 : types[i].dtype;
    load.input = static_cast<int>(i);
    loads.push_back(emitter.add(load));
  }
  return loads;
}

TEST(OpHooks, ElementwiseExprsMatchTheReference) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> uniform(0.1, 2.0);
  const std::vector<std::pair<std::string, int>> ops = {
      {"add", 2},  {"sub", 2},   {"mul", 2},  {"div", 2},     {"pow", 2},  {"neg", 1},
      {"exp", 1},  {"log", 1},   {"tanh", 1}, {"sigmoid", 1}, {"relu", 1}, {"gelu", 1},
      {"sqrt", 1}, {"rsqrt", 1}, {"lt", 2},   {"ge", 2},      {"ne", 2}};
  for (const auto& [op, arity] : ops) {
    std::vector<TensorType> types(static_cast<size_t>(arity), t({16}));
    OpContext context = context_of(op, types);
    codegen::KernelSpec spec;
    spec.iteration_shape = {16};
    codegen::KernelBuilder emitter(spec);
    int result = OpRegistry::global().get(op).elementwise_expr(emitter, load_exprs(emitter, types),
                                                               context)[0];
    ir::ProgramBuilder b;
    std::vector<ir::ValueId> inputs;
    reference::HostTensorList values;
    for (int i = 0; i < arity; ++i) {
      inputs.push_back(b.input("x" + std::to_string(i), {16}));
      reference::HostTensor value{{16}, DType::kF32, {}};
      for (int k = 0; k < 16; ++k) value.data.push_back(uniform(rng) * (k % 3 == 0 ? -1 : 1));
      values.push_back(value);
    }
    if (op == "log" || op == "sqrt" || op == "rsqrt" || op == "pow") {
      for (double& v : values[0].data) v = std::abs(v);
    }
    b.output(b.op1(op, inputs));
    reference::HostTensor expected = reference::reference_run(b.build(), values)[0];
    for (int64_t k = 0; k < 16; ++k) {
      ExprEvaluator evaluator{spec, {}, {k}, {}};
      for (const auto& value : values)
        evaluator.loads.push_back(value.data[static_cast<size_t>(k)]);
      EXPECT_NEAR(evaluator.eval(result), expected.data[static_cast<size_t>(k)], 1e-12)
          << op << " element " << k;
    }
  }
}

TEST(OpHooks, RowReductionPatternsMatchTheReference) {
  std::mt19937 rng(99);
  std::normal_distribution<double> normal;
  const int64_t rows = 3, width = 5;
  auto random = [&](Shape shape) {
    reference::HostTensor value{shape, DType::kF32, {}};
    for (int64_t i = 0; i < runtime::shape_numel(shape); ++i) value.data.push_back(normal(rng));
    return value;
  };
  reference::HostTensor x = random({rows, width});
  reference::HostTensor weight = random({width});
  reference::HostTensor bias = random({width});
  reference::HostTensor labels{{rows}, DType::kI64, {4, 0, 2}};
  struct Case {
    std::string op;
    std::vector<reference::HostTensor> operands;
    Attributes attrs;
  };
  std::vector<Case> cases = {
      {"softmax", {x}, {}},
      {"log_softmax", {x}, {}},
      {"layer_norm", {x, weight, bias}, {}},
      {"sum", {x}, {{"dims", std::vector<int64_t>{1}}}},
      {"mean", {x}, {{"dims", std::vector<int64_t>{1}}}},
      {"max", {x}, {{"dims", std::vector<int64_t>{1}}}},
      {"cross_entropy", {x, labels}, {}},
  };
  for (const Case& c : cases) {
    std::vector<TensorType> types;
    for (const auto& operand : c.operands) types.push_back(t(operand.shape, operand.dtype));
    OpContext context = context_of(c.op, types, c.attrs);
    const OpDef& def = OpRegistry::global().get(c.op);
    ReductionPlan plan = def.reduction_plan(context);
    ASSERT_EQ(plan.reduced_dims, (std::vector<int64_t>{1})) << c.op;
    ASSERT_EQ(plan.operand_layouts.size(), c.operands.size()) << c.op;
    codegen::KernelSpec spec;
    spec.iteration_shape = {rows, width};
    codegen::KernelBuilder emitter(spec);
    int result = def.reduction_expr(emitter, load_exprs(emitter, types), context);

    ir::ProgramBuilder b;
    std::vector<ir::ValueId> inputs;
    for (size_t i = 0; i < c.operands.size(); ++i) {
      inputs.push_back(b.input("in" + std::to_string(i), c.operands[i].shape, c.operands[i].dtype));
    }
    b.output(b.op1(c.op, inputs, c.attrs));
    reference::HostTensor expected = reference::reference_run(b.build(), c.operands)[0];

    double mean_of_rows = 0;
    for (int64_t r = 0; r < rows; ++r) {
      ExprEvaluator evaluator{spec, {}, {r, 0}, {}};
      auto set_loads = [&](int64_t j) {
        evaluator.index = {r, j};
        evaluator.loads.clear();
        for (size_t i = 0; i < c.operands.size(); ++i) {
          int64_t flat = plan.operand_layouts[i] == RowLayout::kFull        ? r * width + j
                         : plan.operand_layouts[i] == RowLayout::kPerRow    ? r
                         : plan.operand_layouts[i] == RowLayout::kPerColumn ? j
                                                                            : 0;
          evaluator.loads.push_back(c.operands[i].data[static_cast<size_t>(flat)]);
        }
      };
      for (const codegen::Reduction& reduction : spec.reductions) {
        double acc = reduction.op == codegen::ReduceOp::kMax ? -INFINITY : 0;
        for (int64_t j = 0; j < width; ++j) {
          set_loads(j);
          double v = evaluator.eval(reduction.expr);
          acc = reduction.op == codegen::ReduceOp::kMax ? std::max(acc, v) : acc + v;
        }
        evaluator.reduced.push_back(acc);
      }
      if (plan.per_row_result) {
        set_loads(0);
        double row_value = evaluator.eval(result);
        if (plan.mean_over_rows) {
          mean_of_rows += row_value / static_cast<double>(rows);
        } else {
          EXPECT_NEAR(row_value, expected.data[static_cast<size_t>(r)], 1e-12) << c.op;
        }
      } else {
        for (int64_t j = 0; j < width; ++j) {
          set_loads(j);
          EXPECT_NEAR(evaluator.eval(result), expected.data[static_cast<size_t>(r * width + j)],
                      1e-12)
              << c.op << " row " << r << " col " << j;
        }
      }
    }
    if (plan.mean_over_rows) {
      EXPECT_NEAR(mean_of_rows, expected.data[0], 1e-12) << c.op;
    }
  }
}

TEST(OpHooks, UpdateExprsReturnOneValuePerMutatedOperand) {
  std::vector<TensorType> types = {t({4}), t({4}), t({4}), t({}), t({}), t({})};
  OpContext context = context_of("sgd_momentum_update", types);
  codegen::KernelSpec spec;
  spec.iteration_shape = {4};
  codegen::KernelBuilder emitter(spec);
  std::vector<int> results = OpRegistry::global()
                                 .get("sgd_momentum_update")
                                 .elementwise_expr(emitter, load_exprs(emitter, types), context);
  ASSERT_EQ(results.size(), 2u);
  ExprEvaluator evaluator{spec, {1.0, 0.5, 0.2, 0.1, 0.9, 0.0}, {0}, {}};
  EXPECT_NEAR(evaluator.eval(results[1]), 0.9 * 0.2 + 0.5, 1e-12);           // new buffer
  EXPECT_NEAR(evaluator.eval(results[0]), 1.0 - 0.1 * (0.18 + 0.5), 1e-12);  // new param
}

TEST(OpRegistry, GradientSlotCanBeFilled) {
  OpRegistry registry;
  OpDef def;
  def.name = "identity";
  def.min_operands = def.max_operands = 1;
  def.infer = [](const OpContext& context) { return std::vector<TensorType>{context.operand(0)}; };
  registry.add(def);
  registry.set_gradient("identity", [](GradientContext&) { return std::vector<ir::ValueId>{}; });
  EXPECT_TRUE(static_cast<bool>(registry.get("identity").gradient));
  EXPECT_THROW(registry.set_gradient("missing", nullptr), Error);
}

}  // namespace
}  // namespace grove::compiler::ops
