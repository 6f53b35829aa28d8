// The pointwise math family beyond elementwise_ops.cc: trigonometry (sin, cos,
// atan), log1p and expm1, rounding (floor, ceil, round, trunc), and the
// elementwise maximum and minimum. The transcendental ones are built from
// exprs every device has (like erf), so no libm call reaches the kernels.
#include <cmath>

#include "compiler/ops/op_helpers.h"

namespace grove::compiler::ops {

namespace {

using codegen::ExprOp;
using codegen::KernelBuilder;

// Exprs over f32 values with short names, for the polynomial code below.
struct F32Exprs {
  KernelBuilder& e;
  int c(double value) { return e.constant(value, DType::kF32); }
  int add(int a, int b) { return e.binary(ExprOp::kAdd, a, b); }
  int sub(int a, int b) { return e.binary(ExprOp::kSub, a, b); }
  int mul(int a, int b) { return e.binary(ExprOp::kMul, a, b); }
  int div(int a, int b) { return e.binary(ExprOp::kDiv, a, b); }
  int floor(int a) { return e.unary(ExprOp::kFloor, a); }
  // c[0] + z (c[1] + z (c[2] + ...)).
  int horner(int z, std::initializer_list<double> coefficients) {
    std::vector<double> k(coefficients);
    int result = c(k.back());
    for (size_t i = k.size() - 1; i-- > 0;) result = add(c(k[i]), mul(z, result));
    return result;
  }
};

// Note [Sine and cosine]: x = n pi/2 + r with n = round(2x/pi) and |r| <=
// pi/4, by Cody-Waite with pi/2 split in three parts whose first two have 8
// and 11 significant bits, and n split in its multiples of 2^12 and the rest,
// so that every product with those two parts is exact for |n| < 2^24 (the
// reduction stays within a few f32 ulps of r for |x| up to ~1e6: rotary
// angles of long contexts); Cephes' minimax polynomials for sin and cos on
// [-pi/4, pi/4]; the quadrant n mod 4 (plus 1 for the cosine) picks the
// polynomial and the sign. Returns sin(x), or cos(x) with `cosine`.
int emit_sin_cos(KernelBuilder& emitter, int x, bool cosine) {
  F32Exprs f{emitter};
  int n = emitter.unary(ExprOp::kRound, f.mul(x, f.c(2.0 / M_PI)));
  // Truncated, so that both parts have n's sign and a small n has no high part.
  int n_high = f.mul(emitter.unary(ExprOp::kTrunc, f.mul(n, f.c(1.0 / 4096))), f.c(4096.0));
  int n_low = f.sub(n, n_high);
  int r = x;
  for (double part : {1.5703125, 4.837512969970703125e-4}) {
    r = f.sub(r, f.mul(n_high, f.c(part)));
    r = f.sub(r, f.mul(n_low, f.c(part)));
  }
  r = f.sub(r, f.mul(n, f.c(7.54978995489188216e-8)));
  int z = f.mul(r, r);
  int sine = f.add(
      r, f.mul(f.mul(r, z), f.horner(z, {-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4})));
  int cosine_r = f.add(f.sub(f.c(1.0), f.mul(f.c(0.5), z)),
                       f.mul(f.mul(z, z), f.horner(z, {4.166664568298827e-2, -1.388731625493765e-3,
                                                       2.443315711809948e-5})));
  int k = cosine ? f.add(n, f.c(1.0)) : n;
  int quadrant = f.sub(k, f.mul(f.c(4.0), f.floor(f.mul(k, f.c(0.25)))));
  int odd = emitter.binary(ExprOp::kOr, emitter.binary(ExprOp::kEq, quadrant, f.c(1.0)),
                           emitter.binary(ExprOp::kEq, quadrant, f.c(3.0)));
  int value = emitter.where(odd, cosine_r, sine);
  int negative = emitter.binary(ExprOp::kGe, quadrant, f.c(2.0));
  return emitter.where(negative, emitter.unary(ExprOp::kNeg, value), value);
}

// atan(x), Cephes' atanf: |x| is reduced to [0, tan(pi/8)] by atan(a) =
// pi/2 + atan(-1/a) above tan(3pi/8) and pi/4 + atan((a-1)/(a+1)) above
// tan(pi/8), then an odd polynomial; atan is odd.
int emit_atan(KernelBuilder& emitter, int x) {
  F32Exprs f{emitter};
  int a = emitter.unary(ExprOp::kAbs, x);
  int big = emitter.binary(ExprOp::kGt, a, f.c(2.414213562373095));
  int mid = emitter.binary(ExprOp::kGt, a, f.c(0.4142135623730950));
  int t = emitter.where(big, f.div(f.c(-1.0), a),
                        emitter.where(mid, f.div(f.sub(a, f.c(1.0)), f.add(a, f.c(1.0))), a));
  int base = emitter.where(big, f.c(M_PI / 2), emitter.where(mid, f.c(M_PI / 4), f.c(0.0)));
  int z = f.mul(t, t);
  int poly =
      f.horner(z, {-3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2});
  int result = f.add(base, f.add(t, f.mul(f.mul(poly, z), t)));
  return emitter.where(emitter.binary(ExprOp::kLt, x, f.c(0.0)),
                       emitter.unary(ExprOp::kNeg, result), result);
}

// log(1 + x) without cancellation: with u = 1 + x rounded, log(u) x / (u - 1)
// corrects the rounding of u (Goldberg); u == 1 gives x itself.
int emit_log1p(KernelBuilder& emitter, int x) {
  F32Exprs f{emitter};
  int u = f.add(f.c(1.0), x);
  int d = f.sub(u, f.c(1.0));
  int corrected = f.mul(emitter.unary(ExprOp::kLog, u), f.div(x, d));
  int infinite = emitter.binary(ExprOp::kEq, u, f.c(INFINITY));
  return emitter.where(emitter.binary(ExprOp::kEq, d, f.c(0.0)), x,
                       emitter.where(infinite, u, corrected));
}

// e^x - 1 without cancellation: with u = e^x rounded, (u - 1) x / log(u)
// (Kahan); u == 1 gives x, and where u - 1 is -1 or x is large, u - 1 is exact
// enough.
int emit_expm1(KernelBuilder& emitter, int x) {
  F32Exprs f{emitter};
  int u = emitter.unary(ExprOp::kExp, x);
  int d = f.sub(u, f.c(1.0));
  int corrected = f.mul(d, f.div(x, emitter.unary(ExprOp::kLog, u)));
  int plain = emitter.binary(ExprOp::kOr, emitter.binary(ExprOp::kEq, d, f.c(-1.0)),
                             emitter.binary(ExprOp::kGt, x, f.c(20.0)));
  return emitter.where(emitter.binary(ExprOp::kEq, d, f.c(0.0)), x,
                       emitter.where(plain, d, corrected));
}

std::function<int(KernelBuilder&, int)> simple(ExprOp op) {
  return [op](KernelBuilder& emitter, int x) { return emitter.unary(op, x); };
}

}  // namespace

void register_math_ops(OpRegistry& registry) {
  registry.add(unary_op("sin", "sin(x) (Note [Sine and cosine])", DTypeRule::kFloating,
                        [](KernelBuilder& e, int x) { return emit_sin_cos(e, x, false); }));
  registry.add(unary_op("cos", "cos(x) (Note [Sine and cosine])", DTypeRule::kFloating,
                        [](KernelBuilder& e, int x) { return emit_sin_cos(e, x, true); }));
  registry.add(unary_op("atan", "arctangent", DTypeRule::kFloating, emit_atan));
  registry.add(unary_op("log1p", "log(1 + x), accurate near 0", DTypeRule::kFloating, emit_log1p));
  registry.add(unary_op("expm1", "e^x - 1, accurate near 0", DTypeRule::kFloating, emit_expm1));
  registry.add(
      unary_op("floor", "round toward -inf", DTypeRule::kFloating, simple(ExprOp::kFloor)));
  registry.add(unary_op("ceil", "round toward +inf", DTypeRule::kFloating, simple(ExprOp::kCeil)));
  registry.add(
      unary_op("trunc", "round toward zero", DTypeRule::kFloating, simple(ExprOp::kTrunc)));
  registry.add(unary_op("round", "round to nearest, ties to even", DTypeRule::kFloating,
                        simple(ExprOp::kRound)));
  registry.add(
      binary_op("maximum", "max(a, b) elementwise", DTypeRule::kNumeric, ExprOp::kMax, false));
  registry.add(
      binary_op("minimum", "min(a, b) elementwise", DTypeRule::kNumeric, ExprOp::kMin, false));
}

}  // namespace grove::compiler::ops
