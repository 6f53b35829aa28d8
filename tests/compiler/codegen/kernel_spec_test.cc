#include "compiler/codegen/kernel_spec.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_builder.h"
#include "runtime/error.h"

namespace grove::compiler::codegen {
namespace {

using runtime::DType;

KernelSpec add_relu(runtime::Shape shape, runtime::Shape b_strides, double constant = 0.5) {
  KernelBuilder k("add_relu", shape);
  int a = k.load(k.input(DType::kF32, runtime::contiguous_strides(shape)));
  int b = k.load(k.input(DType::kBF16, std::move(b_strides)));
  int sum = k.binary(ExprOp::kAdd, k.binary(ExprOp::kAdd, a, b), k.constant(constant));
  k.output(k.unary(ExprOp::kRelu, sum), DType::kF32, runtime::contiguous_strides(shape));
  return k.build();
}

TEST(KernelSpec, SignatureIsStableAndSeparatesShapesStridesAndConstants) {
  const KernelSpec base = add_relu({4, 8}, {0, 1});
  EXPECT_EQ(base.signature(), add_relu({4, 8}, {0, 1}).signature());
  EXPECT_NE(base.signature(), add_relu({4, 9}, {0, 1}).signature());
  EXPECT_NE(base.signature(), add_relu({4, 8}, {1, 0}).signature());
  // Constants differing in the last bit of a double must not share code.
  EXPECT_NE(base.signature(), add_relu({4, 8}, {0, 1}, 0.5 + 1e-16).signature());
  EXPECT_EQ(kernel_symbol(base), kernel_symbol(add_relu({4, 8}, {0, 1})));
  EXPECT_NE(kernel_symbol(base), kernel_symbol(add_relu({4, 9}, {0, 1})));
  EXPECT_EQ(kernel_symbol(base).rfind("add_relu_", 0), 0u) << kernel_symbol(base);
}

TEST(KernelSpec, VerifyRejectsAnOperandThatIsNotAnEarlierExpr) {
  KernelSpec spec = add_relu({4, 8}, {0, 1});
  size_t add = 0;
  while (spec.exprs[add].op != ExprOp::kAdd) ++add;
  spec.exprs[add].operands[0] = static_cast<int>(add) + 1;
  try {
    spec.verify();
    FAIL() << "verify accepted a forward reference";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(str_cat("expr ", add)), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("earlier exprs"), std::string::npos) << error.what();
  }
}

TEST(KernelSpec, VerifyRejectsMismatchedDTypesWithDTypeError) {
  KernelBuilder k("bad", {4});
  int x = k.load(k.input(DType::kI32, {1}), DType::kI32);
  int y = k.load(k.input(DType::kF32, {1}));
  k.output(k.binary(ExprOp::kAdd, x, y), DType::kF32, {1});
  EXPECT_THROW(k.build(), DTypeError);
  KernelBuilder exp_of_int("bad_exp", {4});
  int i = exp_of_int.load(exp_of_int.input(DType::kI32, {1}), DType::kI32);
  exp_of_int.output(exp_of_int.unary(ExprOp::kExp, i), DType::kF32, {1});
  EXPECT_THROW(exp_of_int.build(), DTypeError);
}

TEST(KernelSpec, VerifyRejectsStridesOfTheWrongRankWithShapeError) {
  KernelSpec spec = add_relu({4, 8}, {0, 1});
  spec.inputs[1].strides = {1};
  EXPECT_THROW(spec.verify(), ShapeError);
  spec = add_relu({4, 8}, {0, 1});
  spec.outputs[0].strides = {8, 1, 1};
  EXPECT_THROW(spec.verify(), ShapeError);
}

TEST(KernelSpec, VerifyRejectsPerRowOutputsThatVaryAlongTheRow) {
  KernelBuilder k("row_sum", {3, 7});
  int x = k.load(k.input(DType::kF32, {7, 1}));
  int total = k.reduced(k.reduce(ReduceOp::kSum, x));
  k.output(k.binary(ExprOp::kAdd, total, x), DType::kF32, {1}, /*per_row=*/true);
  try {
    k.build();
    FAIL() << "a per-row output that reads x[row, k] was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("varies along the reduced dimension"),
              std::string::npos)
        << error.what();
  }
}

TEST(KernelSpec, VerifyRejectsAReductionThatReadsItselfOrALaterOne) {
  KernelBuilder k("self", {3, 7});
  int x = k.load(k.input(DType::kF32, {7, 1}));
  int early = k.binary(ExprOp::kAdd, x, k.reduced(1));
  k.reduce(ReduceOp::kSum, early);
  k.reduce(ReduceOp::kMax, x);
  k.output(k.reduced(0), DType::kF32, {1}, true);
  EXPECT_THROW(k.build(), Error);
}

TEST(KernelSpec, VerifyRejectsNamesThatCannotBeSymbols) {
  KernelSpec spec = add_relu({4, 8}, {0, 1});
  spec.name = "add relu";
  EXPECT_THROW(spec.verify(), Error);
  spec.name = "";
  EXPECT_THROW(spec.verify(), Error);
}

TEST(KernelSpec, VerifyRejectsOutOfRangeLeaves) {
  KernelSpec spec = add_relu({4, 8}, {0, 1});
  spec.exprs[0].input = 2;
  EXPECT_THROW(spec.verify(), Error);
  KernelBuilder k("scalar", {4});
  int s = k.scalar();
  k.output(s, DType::kF32, {1});
  KernelSpec scalar_spec = k.build();
  scalar_spec.exprs[0].input = 1;
  EXPECT_THROW(scalar_spec.verify(), Error);
}

TEST(KernelSpec, LaunchGeometryFollowsTheDocumentedRules) {
  const KernelSpec elementwise = add_relu({1000, 1000}, {0, 1});
  runtime::LaunchDims dims = kernel_launch_dims(elementwise, runtime::DeviceType::kCuda);
  EXPECT_EQ(dims.block.x, 256u);
  EXPECT_EQ(dims.grid.x, 977u);  // four elements per thread: Note [Unrolled elementwise kernels]
  EXPECT_EQ(kernel_launch_dims(add_relu({20000, 1000}, {0, 1}), runtime::DeviceType::kCuda).grid.x,
            4096u);
  KernelBuilder k("rows", {50, 100});
  k.output(k.reduced(k.reduce(ReduceOp::kSum, k.load(k.input(DType::kF32, {100, 1})))), DType::kF32,
           {1}, true);
  dims = kernel_launch_dims(k.build(), runtime::DeviceType::kCuda);
  EXPECT_EQ(dims.grid.x, 50u);
  EXPECT_EQ(dims.block.x, 128u);
  KernelBuilder short_rows("short_rows", {50, 20});
  short_rows.output(short_rows.reduced(short_rows.reduce(
                        ReduceOp::kSum, short_rows.load(short_rows.input(DType::kF32, {20, 1})))),
                    DType::kF32, {1}, true);
  dims = kernel_launch_dims(short_rows.build(), runtime::DeviceType::kCuda);
  EXPECT_EQ(dims.grid.x, 13u);  // a warp per row, 4 per block: Note [Short rows held by a warp]
  EXPECT_EQ(dims.block.x, 128u);
  ::setenv("GROVE_WARP_HELD_ROWS", "0", 1);
  dims = kernel_launch_dims(short_rows.build(), runtime::DeviceType::kCuda);
  ::unsetenv("GROVE_WARP_HELD_ROWS");
  EXPECT_EQ(dims.grid.x, 50u);
  EXPECT_EQ(dims.block.x, 32u);
  EXPECT_EQ(kernel_launch_dims(k.build(), runtime::DeviceType::kSim).grid.count(), 1u);
}

}  // namespace
}  // namespace grove::compiler::codegen
