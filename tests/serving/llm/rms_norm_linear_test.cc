// The rms_norm_linear and rms_norm_swiglu ops (Note [RMSNorm GEMV], runtime/rms_norm_gemv_kernel.h)
// lowered as a launch hook with a fresh result (Note [Launch hooks with fresh
// results], compiler/lowering/scheduler.cc): on sim it gives rms_norm then
// linear within bf16 rounding, eager and in a recorded graph, and refuses
// shapes its kernel does not take.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace grove {
namespace {

using compiler::ir::kNoValue;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::Tensor;

constexpr uint32_t kSeed = 2038;

Tensor random_bf16(const runtime::Shape& shape, std::mt19937& rng, double center = 0) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  std::vector<uint16_t> bits(static_cast<size_t>(count));
  for (uint16_t& value : bits) {
    value = runtime::float_to_bf16_bits(static_cast<float>(center) + 0.5f * normal(rng));
  }
  return Tensor::from_host(bits.data(), shape, DType::kBF16, runtime::kSimDevice);
}

// Outputs: the fused ops, then the unfused ones: rms_norm_linear against
// rms_norm and linear, rms_norm_swiglu against silu(gate) * up of those over
// the first 2 * n / 2 rows of w.
compiler::ir::Program both_ways(int64_t rows, int64_t k, int64_t n) {
  ProgramBuilder b("rms_norm_linear", runtime::kSimDevice);
  ValueId x = b.input("x", {rows, k}, DType::kBF16);
  ValueId gain = b.input("gain", {k}, DType::kBF16);
  ValueId w = b.input("w", {n, k}, DType::kBF16);
  compiler::ir::Attributes eps;
  eps.set("eps", 1e-5);
  b.output(b.op1("rms_norm_linear", {x, gain, w}, eps));
  b.output(b.op1("rms_norm_swiglu", {x, gain, w}, eps));
  ValueId projected = b.linear(b.op1("rms_norm", {x, gain}, eps), w, kNoValue);
  b.output(projected);
  ValueId gate = b.slice(projected, 1, 0, n / 2);
  ValueId up = b.slice(projected, 1, n / 2, n);
  b.output(b.mul(b.mul(gate, b.sigmoid(gate)), up));
  compiler::ir::Attributes f32_out = eps;
  f32_out.set("out_dtype", std::string("f32"));
  b.output(b.op1("rms_norm_linear", {x, gain, w}, f32_out));  // output 0 widened
  return b.build();
}

class RmsNormLinear : public ::testing::TestWithParam<const char*> {};

TEST_P(RmsNormLinear, EqualsRmsNormThenLinear) {
  std::mt19937 rng(kSeed);
  for (int64_t rows : {1}) {
    const int64_t k = 64;
    const int64_t n = 24;
    compiler::backends::CompiledModel model = compiler::backends::compile(
        both_ways(rows, k, n), {.backend = GetParam(), .device = runtime::kSimDevice});
    const compiler::TensorList inputs = {random_bf16({rows, k}, rng), random_bf16({k}, rng, 1.0),
                                         random_bf16({n, k}, rng)};
    for (int call = 0; call < 3; ++call) {  // cudagraphs: warm-up, recording, replay
      compiler::TensorList outputs = model(inputs);
      for (size_t gated = 0; gated < 2; ++gated) {
        std::vector<double> fused = outputs.at(gated).to_doubles();
        std::vector<double> reference = outputs.at(2 + gated).to_doubles();
        ASSERT_EQ(fused.size(), static_cast<size_t>(rows * n / (gated ? 2 : 1)));
        ASSERT_EQ(fused.size(), reference.size());
        for (size_t i = 0; i < fused.size(); ++i) {
          // bf16 results: the norm's rstd may differ in its last bit (another
          // order of summing the squares), a product by a bf16 step.
          EXPECT_NEAR(fused[i], reference[i], 0.02 * (1 + std::fabs(reference[i])))
              << (gated ? "rms_norm_swiglu" : "rms_norm_linear") << " rows " << rows << " element "
              << i << " call " << call << " seed " << kSeed;
        }
      }
      ASSERT_EQ(outputs.at(4).dtype(), DType::kF32);
      EXPECT_EQ(outputs.at(4).to_doubles(), outputs.at(0).to_doubles()) << "out_dtype f32";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RmsNormLinear, ::testing::Values("eager", "cudagraphs"));

TEST(RmsNormLinearShapes, RefusesWhatItsKernelDoesNotTake) {
  ProgramBuilder b("refused", runtime::kSimDevice);
  ValueId x = b.input("x", {2, 64}, DType::kBF16);  // 2 rows: the kernel takes one
  ValueId gain = b.input("gain", {64}, DType::kBF16);
  ValueId w = b.input("w", {8, 64}, DType::kBF16);
  EXPECT_THROW(b.op1("rms_norm_linear", {x, gain, w}), Error);
  ValueId row = b.input("row", {1, 64}, DType::kBF16);
  compiler::ir::Attributes f32_out;
  f32_out.set("out_dtype", std::string("f32"));
  EXPECT_THROW(b.op1("rms_norm_swiglu", {row, gain, w}, f32_out), Error);  // gated stores bf16
  ProgramBuilder f("refused_f32", runtime::kSimDevice);
  ValueId x32 = f.input("x", {1, 64}, DType::kF32);
  ValueId gain32 = f.input("gain", {64}, DType::kF32);
  ValueId w32 = f.input("w", {8, 64}, DType::kF32);
  EXPECT_THROW(f.op1("rms_norm_linear", {x32, gain32, w32}), Error);
}

}  // namespace
}  // namespace grove
