// The two KernelSpec exprs the lowering added to codegen (Note [Kernel spec
// gathers and randomness]): kLoadAt gathers by a computed offset, kPhilox
// draws exactly compiler/ops/philox.h's numbers, on the host and in PTX.
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_builder.h"
#include "compiler/codegen/kernel_compiler.h"
#include "compiler/ops/philox.h"
#include "runtime/device_context.h"
#include "runtime/tensor.h"

namespace grove {
namespace {

using compiler::codegen::ExprOp;
using compiler::codegen::KernelBuilder;
using runtime::DType;
using runtime::kSimDevice;
using runtime::Tensor;

compiler::codegen::KernelSpec philox_spec(int64_t n) {
  KernelBuilder k("philox_draws", {n});
  int seed = k.load(k.input(DType::kI64, {0}), DType::kI64);
  int counter = k.binary(ExprOp::kAdd, k.load(k.input(DType::kI64, {0}), DType::kI64), k.index(0));
  k.output(k.philox(seed, counter), DType::kF32, {1});
  return k.build();
}

TEST(CodegenExtension, PhiloxDrawsMatchTheHostGeneratorBitForBit) {
  const int64_t n = 1000;
  const int64_t seed = 0x1234567890abcdefLL, offset = 77;
  compiler::codegen::CompiledKernel kernel =
      compiler::codegen::compile_kernel(philox_spec(n), kSimDevice);
  Tensor seed_tensor = Tensor::from_vector(std::vector<int64_t>{seed}, {}, kSimDevice);
  Tensor offset_tensor = Tensor::from_vector(std::vector<int64_t>{offset}, {}, kSimDevice);
  Tensor out = Tensor::empty({n}, DType::kF32, kSimDevice);
  compiler::codegen::launch(kernel, {seed_tensor, offset_tensor}, {out});
  std::vector<float> draws = out.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(draws[static_cast<size_t>(i)],
              compiler::ops::philox_uniform(static_cast<uint64_t>(seed),
                                            static_cast<uint64_t>(offset + i)))
        << "draw " << i;
  }
}

TEST(CodegenExtension, LoadAtGathersRowsByComputedOffsets) {
  // out[i, j] = table[ids[i], j] over a [5, 3] table.
  KernelBuilder k("gather_rows", {4, 3});
  int table = k.input(DType::kBF16, {0, 0});
  int id = k.load(k.input(DType::kI32, {1, 0}), DType::kI64);
  int at =
      k.binary(ExprOp::kAdd, k.binary(ExprOp::kMul, id, k.constant(3, DType::kI64)), k.index(1));
  k.output(k.load_at(table, at), DType::kF32, {3, 1});
  compiler::codegen::KernelSpec spec = k.build();
  EXPECT_NE(spec.signature().find("load_at"), std::string::npos);
  std::vector<float> values(15);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 2.0f;
  std::vector<uint16_t> bits;
  for (float value : values) bits.push_back(runtime::float_to_bf16_bits(value));
  Tensor table_tensor = Tensor::from_host(bits.data(), {5, 3}, DType::kBF16, kSimDevice);
  std::vector<int32_t> ids = {4, 0, 2, 4};
  Tensor id_tensor = Tensor::from_vector(ids, {4}, kSimDevice);
  Tensor out = Tensor::empty({4, 3}, DType::kF32, kSimDevice);
  compiler::codegen::launch(compiler::codegen::compile_kernel(spec, kSimDevice),
                            {table_tensor, id_tensor}, {out});
  std::vector<float> result = out.to_vector<float>();
  for (size_t i = 0; i < 4; ++i) {
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(result[i * 3 + j], values[static_cast<size_t>(ids[i]) * 3 + j]);
    }
  }
}

TEST(CodegenExtension, SpecsWithGathersAndDrawsEmitPtx) {
  std::string ptx = compiler::codegen::emit_ptx(philox_spec(4096));
  EXPECT_NE(ptx.find(".entry"), std::string::npos);
  bool wide_products =
      ptx.find("mul.wide.u32") != std::string::npos || ptx.find("mul.hi.u32") != std::string::npos;
  EXPECT_TRUE(wide_products) << "expected Philox's 32x32->64 products in\n" << ptx;
}

TEST(CodegenExtension, VerifyRejectsBadOperandsNamingTheExpr) {
  KernelBuilder k("bad_draw", {4});
  int x = k.load(k.input(DType::kF32, {1}));
  k.output(k.philox(x, x), DType::kF32, {1});
  try {
    k.build();
    FAIL() << "expected a DTypeError";
  } catch (const DTypeError& error) {
    EXPECT_NE(std::string(error.what()).find("expr 1 (philox)"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace grove
