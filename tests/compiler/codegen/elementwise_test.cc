// Elementwise kernels on the host: through sim (compile_kernel, C library
// math) and as raw host functions with the device's portable math.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_builder.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace grove::compiler::codegen {
namespace {

using runtime::DType;
using runtime::Shape;
using testing::Buffer;
using testing::close;

constexpr uint32_t kSeed = 1234;

enum class Mode { kSim, kPortableHost };

std::vector<Buffer> run(Mode mode, const KernelSpec& spec, const std::vector<Buffer>& inputs,
                        const std::vector<float>& scalars = {}) {
  if (mode == Mode::kSim) return testing::run_kernel(spec, runtime::kSimDevice, inputs, scalars);
  CodegenOptions options;
  options.portable_math = true;
  return testing::run_host_function(jit_host_kernel(spec, options), spec, inputs, scalars);
}

class Elementwise : public ::testing::TestWithParam<Mode> {};

double gelu_reference(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_P(Elementwise, ChainWithBroadcastingAndTransposedStridesMatchesDoubleReference) {
  std::mt19937 rng(kSeed);
  const Shape shape = {3, 5, 7};
  KernelBuilder k("chain", shape);
  int x = k.load(k.input(DType::kF32, {35, 7, 1}));
  int w = k.load(k.input(DType::kF32, {0, 0, 1}));   // broadcast over dims 0 and 1
  int b = k.load(k.input(DType::kBF16, {0, 1, 0}));  // broadcast over dims 0 and 2
  int t = k.load(k.input(DType::kF32, {1, 3, 15}));  // a transposed [7, 5, 3] buffer
  int shift = k.scalar();
  int pre = k.binary(ExprOp::kAdd, k.binary(ExprOp::kMul, x, w), b);
  int value = k.binary(ExprOp::kSub, k.unary(ExprOp::kGelu, pre), k.binary(ExprOp::kMul, t, shift));
  k.output(value, DType::kF32, {35, 7, 1});
  k.output(value, DType::kF32, {1, 3, 15});  // written transposed as well
  const KernelSpec spec = k.build();
  std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, 105, -3, 3),
                                testing::random_buffer(rng, DType::kF32, 7, -2, 2),
                                testing::random_buffer(rng, DType::kBF16, 5, -1, 1),
                                testing::random_buffer(rng, DType::kF32, 105, -1, 1)};
  const float scalar = 0.75f;
  std::vector<Buffer> outputs = run(GetParam(), spec, inputs, {scalar});
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      for (int l = 0; l < 7; ++l) {
        double p = inputs[0].values[i * 35 + j * 7 + l] * inputs[1].values[l] + inputs[2].values[j];
        double expected = gelu_reference(p) - inputs[3].values[i + 3 * j + 15 * l] * scalar;
        ASSERT_TRUE(close(outputs[0].values[i * 35 + j * 7 + l], expected, 1e-5, 1e-6))
            << "seed " << kSeed << " at " << i << "," << j << "," << l;
        ASSERT_EQ(outputs[1].values[i + 3 * j + 15 * l], outputs[0].values[i * 35 + j * 7 + l]);
      }
    }
  }
}

struct UnaryCase {
  ExprOp op;
  double low, high;
  std::function<double(double)> reference;
  double rtol;
};

TEST_P(Elementwise, EveryUnaryFloatOpMatchesDoubleReference) {
  const std::vector<UnaryCase> cases = {
      {ExprOp::kNeg, -5, 5, [](double x) { return -x; }, 0},
      {ExprOp::kExp, -20, 20, [](double x) { return std::exp(x); }, 2e-6},
      {ExprOp::kLog, 1e-4, 1e4, [](double x) { return std::log(x); }, 2e-6},
      {ExprOp::kTanh, -6, 6, [](double x) { return std::tanh(x); }, 2e-6},
      {ExprOp::kSigmoid, -12, 12, [](double x) { return 1 / (1 + std::exp(-x)); }, 2e-6},
      {ExprOp::kRelu, -5, 5, [](double x) { return x < 0 ? 0 : x; }, 0},
      {ExprOp::kGelu, -6, 6, gelu_reference, 2e-6},
      {ExprOp::kSqrt, 0, 100, [](double x) { return std::sqrt(x); }, 1e-7},
      {ExprOp::kRsqrt, 1e-3, 100, [](double x) { return 1 / std::sqrt(x); }, 2e-7},
      {ExprOp::kAbs, -5, 5, [](double x) { return std::fabs(x); }, 0},
  };
  std::mt19937 rng(kSeed);
  for (const UnaryCase& c : cases) {
    KernelBuilder k("unary", {257});
    k.output(k.unary(c.op, k.load(k.input(DType::kF32, {1}))), DType::kF32, {1});
    const KernelSpec spec = k.build();
    std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, 257, c.low, c.high)};
    std::vector<Buffer> outputs = run(GetParam(), spec, inputs);
    for (int i = 0; i < 257; ++i) {
      const double x = inputs[0].values[i];
      ASSERT_TRUE(close(outputs[0].values[i], c.reference(x), c.rtol, 1e-7))
          << "op " << static_cast<int>(c.op) << " x=" << x << " got " << outputs[0].values[i]
          << " expected " << c.reference(x) << " (seed " << kSeed << ")";
    }
  }
}

TEST_P(Elementwise, BinaryComparisonLogicWhereAndCastOpsMatchReference) {
  std::mt19937 rng(kSeed + 1);
  const int n = 300;
  KernelBuilder k("binary", {n});
  int a = k.load(k.input(DType::kF32, {1}));
  int b = k.load(k.input(DType::kF32, {1}));
  int ia = k.load(k.input(DType::kI32, {1}), DType::kI32);
  int ib = k.load(k.input(DType::kI64, {1}), DType::kI32);  // i64 buffer read as i32
  const std::vector<ExprOp> float_ops = {ExprOp::kAdd, ExprOp::kSub, ExprOp::kMul,
                                         ExprOp::kDiv, ExprOp::kMax, ExprOp::kMin};
  for (ExprOp op : float_ops) k.output(k.binary(op, a, b), DType::kF32, {1});
  k.output(k.binary(ExprOp::kPow, k.unary(ExprOp::kAbs, a), b), DType::kF32, {1});
  const std::vector<ExprOp> compares = {ExprOp::kLt, ExprOp::kLe, ExprOp::kGt,
                                        ExprOp::kGe, ExprOp::kEq, ExprOp::kNe};
  for (ExprOp op : compares) k.output(k.binary(op, ia, ib), DType::kBool, {1});
  int lt = k.binary(ExprOp::kLt, a, b);
  int positive = k.binary(ExprOp::kGt, a, k.constant(0));
  k.output(k.binary(ExprOp::kAnd, lt, positive), DType::kBool, {1});
  k.output(k.binary(ExprOp::kOr, lt, k.unary(ExprOp::kNot, positive)), DType::kI32, {1});
  k.output(k.where(lt, a, b), DType::kF32, {1});
  for (ExprOp op : {ExprOp::kAdd, ExprOp::kSub, ExprOp::kMul, ExprOp::kMax, ExprOp::kMin}) {
    k.output(k.binary(op, ia, ib), DType::kI64, {1});
  }
  k.output(k.unary(ExprOp::kNeg, ia), DType::kI32, {1});
  k.output(k.unary(ExprOp::kAbs, ia), DType::kI32, {1});
  k.output(k.unary(ExprOp::kRelu, ia), DType::kI32, {1});
  k.output(k.cast(k.binary(ExprOp::kMul, a, k.constant(10)), DType::kI32), DType::kI64, {1});
  k.output(k.binary(ExprOp::kMul, k.cast(ia, DType::kF32), k.constant(0.5)), DType::kF32, {1});
  k.output(k.cast(a, DType::kBool), DType::kF32, {1});
  k.output(k.binary(ExprOp::kMul, k.cast(k.index(0), DType::kF32), a), DType::kF64, {1});
  const KernelSpec spec = k.build();
  std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, n, -4, 4),
                                testing::random_buffer(rng, DType::kF32, n, -4, 4),
                                testing::random_buffer(rng, DType::kI32, n, -50, 50),
                                testing::random_buffer(rng, DType::kI64, n, -50, 50)};
  for (int i = 0; i < n; i += 7) inputs[1].values[i] = inputs[0].values[i];  // ties
  for (int i = 0; i < n; i += 5) inputs[3].values[i] = inputs[2].values[i];
  inputs[0].values[3] = 0;
  std::vector<Buffer> out = run(GetParam(), spec, inputs);
  for (int i = 0; i < n; ++i) {
    const float fa = static_cast<float>(inputs[0].values[i]);
    const float fb = static_cast<float>(inputs[1].values[i]);
    const double xa = fa, xb = fb;
    const int64_t ja = static_cast<int64_t>(inputs[2].values[i]);
    const int64_t jb = static_cast<int64_t>(inputs[3].values[i]);
    const std::vector<double> expected = {xa + xb,
                                          xa - xb,
                                          xa * xb,
                                          xa / xb,
                                          std::max(xa, xb),
                                          std::min(xa, xb),
                                          std::pow(std::fabs(xa), xb),
                                          double(ja < jb),
                                          double(ja <= jb),
                                          double(ja > jb),
                                          double(ja >= jb),
                                          double(ja == jb),
                                          double(ja != jb),
                                          double(xa < xb && xa > 0),
                                          double(xa < xb || !(xa > 0)),
                                          xa < xb ? xa : xb,
                                          double(ja + jb),
                                          double(ja - jb),
                                          double(ja * jb),
                                          double(std::max(ja, jb)),
                                          double(std::min(ja, jb)),
                                          double(-ja),
                                          double(std::abs(ja)),
                                          double(std::max<int64_t>(ja, 0)),
                                          std::trunc(static_cast<double>(fa * 10.0f)),
                                          ja * 0.5,
                                          double(xa != 0),
                                          double(i) * xa};
    ASSERT_EQ(out.size(), expected.size());
    for (size_t o = 0; o < expected.size(); ++o) {
      const double tolerance = o == 6 ? 2e-6 : 1e-6;
      ASSERT_TRUE(close(out[o].values[i], expected[o], tolerance, 1e-6))
          << "output " << o << " element " << i << ": got " << out[o].values[i] << ", expected "
          << expected[o] << " (seed " << kSeed + 1 << ")";
    }
  }
}

TEST_P(Elementwise, Bf16AndF16RoundTripAndRoundToNearestEven) {
  std::mt19937 rng(kSeed + 2);
  const int n = 512;
  KernelBuilder k("round_trip", {n});
  int x = k.load(k.input(DType::kBF16, {1}));
  int y = k.load(k.input(DType::kF32, {1}));
  int h = k.load(k.input(DType::kF16, {1}));
  k.output(x, DType::kBF16, {1});                             // exact round trip
  k.output(k.binary(ExprOp::kAdd, x, y), DType::kBF16, {1});  // rounds
  k.output(h, DType::kF16, {1});
  k.output(k.binary(ExprOp::kMul, h, y), DType::kF16, {1});
  const KernelSpec spec = k.build();
  std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kBF16, n, -100, 100),
                                testing::random_buffer(rng, DType::kF32, n, -1, 1),
                                testing::random_buffer(rng, DType::kF16, n, -10, 10)};
  // Values exactly halfway between two bf16 numbers: 1 + 2^-8 rounds to 1 (even), 1 + 3*2^-8 to 1 +
  // 2^-6.
  inputs[0].values[0] = 1.0;
  inputs[1].values[0] = std::ldexp(1.0, -8);
  inputs[0].values[1] = 1.0 + std::ldexp(1.0, -7);
  inputs[1].values[1] = std::ldexp(1.0, -8);
  std::vector<Buffer> out = run(GetParam(), spec, inputs);
  EXPECT_EQ(out[1].values[0], 1.0);
  EXPECT_EQ(out[1].values[1], 1.0 + std::ldexp(1.0, -6));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out[0].values[i], inputs[0].values[i]) << i;
    const float sum =
        static_cast<float>(inputs[0].values[i]) + static_cast<float>(inputs[1].values[i]);
    ASSERT_EQ(out[1].values[i], runtime::bf16_bits_to_float(runtime::float_to_bf16_bits(sum))) << i;
    ASSERT_EQ(out[2].values[i], inputs[2].values[i]) << i;
    const float product =
        static_cast<float>(inputs[2].values[i]) * static_cast<float>(inputs[1].values[i]);
    ASSERT_EQ(out[3].values[i], runtime::f16_bits_to_float(runtime::float_to_f16_bits(product)))
        << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HostJit, Elementwise, ::testing::Values(Mode::kSim, Mode::kPortableHost),
                         [](const auto& info) {
                           return info.param == Mode::kSim ? std::string("SimCLibrary")
                                                           : std::string("PortableMath");
                         });

// The polynomial math that NVPTX kernels use, checked on the host over wide ranges.
TEST(PortableMath, MatchesDoubleWithinAboutOneMicroRelativeAndHandlesSpecialValues) {
  const int n = 4001;
  KernelBuilder k("portable_math", {n});
  int x = k.load(k.input(DType::kF32, {1}));
  int y = k.load(k.input(DType::kF32, {1}));
  k.output(k.unary(ExprOp::kExp, x), DType::kF32, {1});
  k.output(k.unary(ExprOp::kLog, k.unary(ExprOp::kAbs, x)), DType::kF32, {1});
  k.output(k.unary(ExprOp::kTanh, k.binary(ExprOp::kMul, x, k.constant(0.1))), DType::kF32, {1});
  k.output(k.binary(ExprOp::kPow, k.unary(ExprOp::kAbs, x), y), DType::kF32, {1});
  const KernelSpec spec = k.build();
  CodegenOptions options;
  options.portable_math = true;
  runtime::HostKernelFn function = jit_host_kernel(spec, options);
  std::vector<double> xs(n), ys(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = static_cast<float>(-87.0 + 174.0 * i / (n - 1));
    ys[i] = static_cast<float>(-3.0 + 6.0 * ((i * 7919) % n) / n);
  }
  std::vector<Buffer> out =
      testing::run_host_function(function, spec, {{DType::kF32, xs}, {DType::kF32, ys}});
  double worst[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) {
    const double ax = std::fabs(xs[i]);
    const double expected[4] = {std::exp(xs[i]), std::log(ax), std::tanh(xs[i] * 0.1f),
                                std::pow(ax, ys[i])};
    for (int o = 0; o < 4; ++o) {
      if (expected[o] == 0 || std::isinf(expected[o]) || expected[o] < 1e-37) continue;
      if (o == 3 && std::fabs(ys[i] * std::log(ax)) > 10) continue;
      worst[o] =
          std::max(worst[o], std::fabs(out[o].values[i] - expected[o]) / std::fabs(expected[o]));
    }
  }
  EXPECT_LT(worst[0], 1e-6) << "exp";
  EXPECT_LT(worst[1], 1e-6) << "log";
  EXPECT_LT(worst[2], 1e-6) << "tanh";
  EXPECT_LT(worst[3], 2e-6) << "pow";

  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> sx = {inf, -inf, nan, 0.0, -0.0, 1e-40, 100.0, -100.0, 1.0, 2.0};
  std::vector<double> sy = {2.0, 3.0, 0.0, -1.0, 3.0, 0.5, nan, 2.0, nan, -inf};
  const size_t specials = sx.size();
  // The kernel was built for n elements: pad the inputs to n (found by ASan:
  // it read 4001 elements of 10-element buffers).
  sx.resize(n, 1.0);
  sy.resize(n, 1.0);
  std::vector<Buffer> special =
      testing::run_host_function(function, spec, {{DType::kF32, sx}, {DType::kF32, sy}});
  for (size_t i = 0; i < specials; ++i) {
    const float fx = static_cast<float>(sx[i]), fy = static_cast<float>(sy[i]);
    const double expected[4] = {std::exp(fx), std::log(std::fabs(fx)), std::tanh(fx * 0.1f),
                                std::pow(std::fabs(fx), fy)};
    for (int o = 0; o < 4; ++o) {
      EXPECT_TRUE(close(special[o].values[i], expected[o], 2e-6, 1e-44))
          << "output " << o << " x=" << fx << " y=" << fy << ": got " << special[o].values[i]
          << ", expected " << expected[o];
    }
  }
}

TEST(PortableMath, PowOfNegativeBasesFollowsTheCLibrary) {
  KernelBuilder k("pow_signs", {6});
  int base = k.load(k.input(DType::kF32, {1}));
  int exponent = k.load(k.input(DType::kF32, {1}));
  k.output(k.binary(ExprOp::kPow, base, exponent), DType::kF32, {1});
  const KernelSpec spec = k.build();
  CodegenOptions options;
  options.portable_math = true;
  std::vector<double> xs = {-2.0, -2.0, -2.0, -0.0, -1.5, 0.0};
  std::vector<double> ys = {3.0, 2.0, 0.5, 3.0, -2.0, -1.0};
  std::vector<Buffer> out = testing::run_host_function(jit_host_kernel(spec, options), spec,
                                                       {{DType::kF32, xs}, {DType::kF32, ys}});
  for (size_t i = 0; i < xs.size(); ++i) {
    const double expected = std::pow(static_cast<float>(xs[i]), static_cast<float>(ys[i]));
    EXPECT_TRUE(close(out[0].values[i], expected, 1e-6, 0))
        << xs[i] << "^" << ys[i] << " = " << out[0].values[i];
    if (!std::isnan(expected)) {
      EXPECT_EQ(std::signbit(out[0].values[i]), std::signbit(expected)) << xs[i] << "^" << ys[i];
    }
  }
}

}  // namespace
}  // namespace grove::compiler::codegen
