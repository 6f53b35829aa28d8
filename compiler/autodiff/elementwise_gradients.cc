// Gradient rules of the elementwise ops. Binary ops broadcast, so each
// operand's gradient is summed back to the operand's shape.
#include <cmath>
#include <string>

#include "compiler/autodiff/gradient_context.h"
#include "compiler/autodiff/gradient_rules.h"

namespace grove::compiler::autodiff {

namespace {

using ops::GradientContext;
using Grads = std::vector<ValueId>;

DType dtype_of(GradientContext& c) { return c.result_type().dtype; }

// `grad` summed to operand `index`'s shape, or kNoValue when not wanted.
ValueId to_operand(GradientContext& c, size_t index, ValueId grad) {
  if (!c.wants(index)) return ir::kNoValue;
  return sum_to_shape(c.b(), grad, c.operand_type(index).shape);
}

void set(const std::string& op, ops::GradientRule rule) {
  ops::OpRegistry::global().set_gradient(op, std::move(rule));
}

// A unary op whose gradient is g * f'(x), with f' built from x and y = f(x).
void unary(const std::string& op,
           std::function<ValueId(ProgramBuilder&, ValueId g, ValueId x, ValueId y, DType)> rule) {
  set(op, [rule](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    return {rule(c.b(), c.grad(), c.operand(0), c.result(), dtype_of(c))};
  });
}

}  // namespace

namespace detail {

void register_elementwise_gradients() {
  set("add", [](GradientContext& c) -> Grads {
    return {to_operand(c, 0, c.grad()), to_operand(c, 1, c.grad())};
  });
  set("sub", [](GradientContext& c) -> Grads {
    ValueId right = c.wants(1) ? c.b().neg(c.grad()) : ir::kNoValue;
    return {to_operand(c, 0, c.grad()), c.wants(1) ? to_operand(c, 1, right) : ir::kNoValue};
  });
  set("mul", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    Grads grads(2, ir::kNoValue);
    if (c.wants(0)) grads[0] = to_operand(c, 0, b.mul(c.grad(), c.operand(1)));
    if (c.wants(1)) grads[1] = to_operand(c, 1, b.mul(c.grad(), c.operand(0)));
    return grads;
  });
  // y = a / b:  da = g / b,  db = -g a / b^2.
  set("div", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    Grads grads(2, ir::kNoValue);
    if (c.wants(0)) grads[0] = to_operand(c, 0, b.div(c.grad(), c.operand(1)));
    if (c.wants(1)) {
      ValueId numerator = b.mul(c.grad(), c.operand(0));
      grads[1] = to_operand(c, 1, b.neg(b.div(numerator, b.mul(c.operand(1), c.operand(1)))));
    }
    return grads;
  });
  // y = a^b:  da = g b a^(b-1),  db = g y ln(a)  (defined for a > 0).
  set("pow", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    DType dtype = dtype_of(c);
    Grads grads(2, ir::kNoValue);
    if (c.wants(0)) {
      ValueId power = b.pow(c.operand(0), b.sub(c.operand(1), scalar(b, 1.0, dtype)));
      grads[0] = to_operand(c, 0, b.mul(c.grad(), b.mul(c.operand(1), power)));
    }
    if (c.wants(1)) {
      grads[1] = to_operand(c, 1, b.mul(c.grad(), b.mul(c.result(), b.log(c.operand(0)))));
    }
    return grads;
  });

  unary("neg", [](ProgramBuilder& b, ValueId g, ValueId, ValueId, DType) { return b.neg(g); });
  unary("exp", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType) { return b.mul(g, y); });
  unary("log", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType) { return b.div(g, x); });
  unary("tanh", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType dtype) {
    return b.mul(g, b.sub(scalar(b, 1.0, dtype), b.mul(y, y)));
  });
  unary("sigmoid", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType dtype) {
    return b.mul(g, b.mul(y, b.sub(scalar(b, 1.0, dtype), y)));
  });
  // The derivative at exactly 0 is taken as 0 (as PyTorch does).
  unary("relu", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType dtype) {
    return b.where(b.compare("gt", x, scalar(b, 0.0, dtype)), g, scalar(b, 0.0, dtype));
  });
  // One op (g * gelu'(x)), so that the lowering can fuse it into the GEMM
  // that computes g (Note [GEMM gelu gradients] in lowering_graph.h).
  unary("gelu", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType) {
    return b.op1("gelu_backward", {g, x});
  });
  // y = erf(x): dy/dx = 2 / sqrt(pi) e^(-x^2).
  unary("erf", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType dtype) {
    ValueId decay = b.exp(b.neg(b.mul(x, x)));
    return b.mul(g, b.mul(scalar(b, 2.0 / std::sqrt(M_PI), dtype), decay));
  });
  // y = sqrt(x): dy/dx = 1 / (2 y).
  unary("sqrt", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType dtype) {
    return b.div(g, b.mul(scalar(b, 2.0, dtype), y));
  });
  // y = x^-1/2: dy/dx = -y^3 / 2.
  unary("rsqrt", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType dtype) {
    return b.mul(b.mul(g, scalar(b, -0.5, dtype)), b.mul(y, b.mul(y, y)));
  });

  unary("sin", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType) {
    return b.mul(g, b.op1("cos", {x}));
  });
  unary("cos", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType) {
    return b.neg(b.mul(g, b.op1("sin", {x})));
  });
  // y = atan(x): dy/dx = 1 / (1 + x^2).
  unary("atan", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType dtype) {
    return b.div(g, b.add(scalar(b, 1.0, dtype), b.mul(x, x)));
  });
  unary("log1p", [](ProgramBuilder& b, ValueId g, ValueId x, ValueId, DType dtype) {
    return b.div(g, b.add(scalar(b, 1.0, dtype), x));
  });
  unary("expm1", [](ProgramBuilder& b, ValueId g, ValueId, ValueId y, DType dtype) {
    return b.mul(g, b.add(y, scalar(b, 1.0, dtype)));
  });
  // Piecewise constant: zero wherever the derivative exists (as PyTorch).
  for (const char* op : {"floor", "ceil", "round", "trunc"}) {
    unary(op, [](ProgramBuilder& b, ValueId g, ValueId, ValueId, DType dtype) {
      return b.mul(g, scalar(b, 0.0, dtype));
    });
  }
  // Ties split the gradient in halves, as PyTorch's maximum and minimum do.
  for (const char* op : {"maximum", "minimum"}) {
    const std::string wins = std::string(op) == "maximum" ? "gt" : "lt";
    set(op, [wins](GradientContext& c) -> Grads {
      ProgramBuilder& b = c.b();
      DType dtype = dtype_of(c);
      ValueId zero = scalar(b, 0.0, dtype);
      ValueId half = b.mul(c.grad(), scalar(b, 0.5, dtype));
      ValueId tie = b.compare("eq", c.operand(0), c.operand(1));
      Grads grads(2, ir::kNoValue);
      for (size_t k = 0; k < 2; ++k) {
        if (!c.wants(k)) continue;
        ValueId won = b.compare(wins, c.operand(k), c.operand(1 - k));
        grads[k] = to_operand(c, k, b.where(won, c.grad(), b.where(tie, half, zero)));
      }
      return grads;
    });
  }

  set("where", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    ValueId zero = scalar(b, 0.0, dtype_of(c));
    Grads grads(3, ir::kNoValue);
    if (c.wants(1)) grads[1] = to_operand(c, 1, b.where(c.operand(0), c.grad(), zero));
    if (c.wants(2)) grads[2] = to_operand(c, 2, b.where(c.operand(0), zero, c.grad()));
    return grads;
  });
  // Between floating dtypes the gradient is cast back; from an integer or
  // bool operand nothing flows.
  set("cast", [](GradientContext& c) -> Grads {
    if (!c.wants(0) || !runtime::is_floating(c.operand_type(0).dtype)) return {ir::kNoValue};
    return {c.b().cast(c.grad(), c.operand_type(0).dtype)};
  });
  set("full", [](GradientContext&) -> Grads { return {}; });
}

}  // namespace detail

}  // namespace grove::compiler::autodiff
