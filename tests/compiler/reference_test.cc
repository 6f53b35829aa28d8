#include <gtest/gtest.h>

#include <cmath>

#include "compiler/ir/builder.h"
#include "compiler/ops/philox.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/error.h"

namespace grove::compiler::reference {
namespace {

using ir::DType;
using ir::ProgramBuilder;
using ir::ValueId;

HostTensor f32(ir::Shape shape, std::vector<double> data) {
  return HostTensor{std::move(shape), DType::kF32, std::move(data)};
}

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected,
                 double tolerance = 1e-9) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
  }
}

TEST(Reference, BroadcastingArithmeticAndGelu) {
  ProgramBuilder b;
  ValueId x = b.input("x", {2, 3});
  ValueId row = b.input("row", {3});
  b.output(b.mul(b.add(x, row), b.full(2.0)));
  b.output(b.gelu(row));
  HostTensorList out =
      reference_run(b.build(), {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {-1, 0, 1})});
  expect_near(out[0].data, {0, 4, 8, 6, 10, 14});
  // gelu, tanh approximation, at -1, 0, 1.
  expect_near(out[1].data, {-0.15880800939172324, 0, 0.8411919906082768}, 1e-12);
}

TEST(Reference, SoftmaxLayerNormAndCrossEntropy) {
  ProgramBuilder b;
  ValueId x = b.input("x", {1, 3});
  ValueId w = b.input("w", {3});
  ValueId bias = b.input("bias", {3});
  ValueId labels = b.input("labels", {1}, DType::kI64);
  b.output(b.softmax(x));
  b.output(b.log_softmax(x));
  b.output(b.layer_norm(x, w, bias, 1e-5));
  b.output(b.cross_entropy(x, labels));
  HostTensorList out =
      reference_run(b.build(), {f32({1, 3}, {1, 2, 3}), f32({3}, {1, 2, 1}), f32({3}, {0, 0.5, 0}),
                                HostTensor{{1}, DType::kI64, {2}}});
  expect_near(out[0].data, {0.09003057317038046, 0.24472847105479764, 0.6652409557748219}, 1e-12);
  expect_near(out[1].data, {-2.40760596444438, -1.40760596444438, -0.40760596444438}, 1e-12);
  double inv_std = 1 / std::sqrt(2.0 / 3 + 1e-5);
  expect_near(out[2].data, {-inv_std, 0.5, inv_std}, 1e-12);
  expect_near(out[3].data, {0.40760596444438}, 1e-12);
}

TEST(Reference, ReductionsKeepOrDropDims) {
  ProgramBuilder b;
  ValueId x = b.input("x", {2, 3});
  b.output(b.sum(x, {1}));
  b.output(b.mean(x, {0}, true));
  b.output(b.max(x, {}));
  HostTensorList out = reference_run(b.build(), {f32({2, 3}, {1, -2, 3, 4, 5, -6})});
  EXPECT_EQ(out[0].shape, (ir::Shape{2}));
  expect_near(out[0].data, {2, 3});
  EXPECT_EQ(out[1].shape, (ir::Shape{1, 3}));
  expect_near(out[1].data, {2.5, 1.5, -1.5});
  EXPECT_EQ(out[2].shape, (ir::Shape{}));
  expect_near(out[2].data, {5});
}

TEST(Reference, MatmulLinearAndViews) {
  ProgramBuilder b;
  ValueId a = b.input("a", {2, 2});
  ValueId m = b.input("m", {2, 2});
  ValueId bias = b.input("bias", {2});
  b.output(b.matmul(a, m));
  b.output(b.linear(a, m, bias));
  b.output(b.transpose(a, 0, 1));
  b.output(b.slice(b.reshape(a, {4}), 0, -3, 100));
  b.output(b.concat({a, m}, 1));
  HostTensorList out = reference_run(
      b.build(), {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {5, 6, 7, 8}), f32({2}, {10, 20})});
  expect_near(out[0].data, {19, 22, 43, 50});
  expect_near(out[1].data, {17 + 10, 23 + 20, 39 + 10, 53 + 20});
  expect_near(out[2].data, {1, 3, 2, 4});
  expect_near(out[3].data, {2, 3, 4});
  EXPECT_EQ(out[4].shape, (ir::Shape{2, 4}));
  expect_near(out[4].data, {1, 2, 5, 6, 3, 4, 7, 8});
}

TEST(Reference, BatchedMatmulBroadcastsBatchDims) {
  ProgramBuilder b;
  ValueId a = b.input("a", {2, 1, 2});
  ValueId m = b.input("m", {2, 1});
  b.output(b.matmul(a, m));
  HostTensorList out =
      reference_run(b.build(), {f32({2, 1, 2}, {1, 2, 3, 4}), f32({2, 1}, {10, 100})});
  EXPECT_EQ(out[0].shape, (ir::Shape{2, 1, 1}));
  expect_near(out[0].data, {210, 430});
}

TEST(Reference, EmbeddingWhereCompareAndCast) {
  ProgramBuilder b;
  ValueId table = b.input("table", {3, 2});
  ValueId ids = b.input("ids", {2}, DType::kI32);
  ValueId x = b.input("x", {3});
  b.output(b.embedding(table, ids));
  b.output(b.where(b.compare("gt", x, b.full(0.0)), x, b.neg(x)));
  b.output(b.cast(x, DType::kI32));
  b.output(b.cast(x, DType::kBF16));
  HostTensorList out = reference_run(
      b.build(), {f32({3, 2}, {0, 1, 10, 11, 20, 21}), HostTensor{{2}, DType::kI32, {2, 0}},
                  f32({3}, {-1.7, 2.5, 1.001})});
  expect_near(out[0].data, {20, 21, 0, 1});
  expect_near(out[1].data, {1.7, 2.5, 1.001});
  expect_near(out[2].data, {-1, 2, 1});
  expect_near(out[3].data, {-1.703125, 2.5, 1.0});  // bf16 keeps 8 significant bits
}

TEST(Reference, RejectsOutOfRangeIdsAndWrongInputs) {
  ProgramBuilder b;
  ValueId table = b.input("table", {3, 2});
  ValueId ids = b.input("ids", {1}, DType::kI64);
  b.output(b.embedding(table, ids, "lookup"));
  ir::Program program = b.build();
  HostTensor good_table = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  try {
    reference_run(program, {good_table, HostTensor{{1}, DType::kI64, {3}}});
    FAIL() << "expected an out-of-range error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("node 'lookup'"), std::string::npos) << error.what();
  }
  EXPECT_THROW(reference_run(program, {good_table}), Error);
  EXPECT_THROW(
      reference_run(program, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), HostTensor{{1}, DType::kI64, {0}}}),
      ShapeError);
}

TEST(Reference, DropoutFollowsPhiloxAndScalesKeptElements) {
  ProgramBuilder b;
  ValueId x = b.input("x", {4096});
  ValueId seed = b.input("seed", {}, DType::kI64);
  ValueId offset = b.input("offset", {}, DType::kI64);
  b.output(b.dropout(x, seed, offset, 0.25));
  ir::Program program = b.build();
  HostTensor ones = f32({4096}, std::vector<double>(4096, 1.5));
  HostTensor out = reference_run(program, {ones, HostTensor::scalar(42, DType::kI64),
                                           HostTensor::scalar(1000, DType::kI64)})[0];
  int kept = 0;
  for (size_t i = 0; i < out.data.size(); ++i) {
    bool keep = ops::philox_uniform(42, 1000 + i) >= 0.25f;
    ASSERT_DOUBLE_EQ(out.data[i], keep ? 2.0 : 0.0) << i;
    kept += keep;
  }
  EXPECT_NEAR(kept / 4096.0, 0.75, 0.03);
  HostTensor shifted = reference_run(program, {ones, HostTensor::scalar(42, DType::kI64),
                                               HostTensor::scalar(1001, DType::kI64)})[0];
  EXPECT_NE(shifted.data, out.data);
}

TEST(Reference, SgdMomentumUpdatesStateInPlace) {
  ProgramBuilder b;
  ValueId p = b.param("p", {2}, DType::kF32, ir::ones_init());
  ValueId g = b.input("g", {2});
  ValueId buf = b.buffer("buf", {2}, DType::kF32, ir::zeros_init());
  ValueId lr = b.input("lr", {});
  ValueId momentum = b.input("momentum", {});
  ValueId decay = b.input("decay", {});
  for (ValueId v : b.sgd_momentum_update(p, g, buf, lr, momentum, decay)) b.output(v);
  ir::Program program = b.build();
  HostTensorList inputs = initial_state(program);
  inputs[1] = f32({2}, {0.5, -1});
  inputs[3] = HostTensor::scalar(0.1);
  inputs[4] = HostTensor::scalar(0.9);
  inputs[5] = HostTensor::scalar(0.01);
  reference_run_in_place(program, inputs);
  // g' = g + 0.01 p = [0.51, -0.99]; buf = g'; p = 1 - 0.1 buf.
  expect_near(inputs[0].data, {1 - 0.051, 1 + 0.099}, 1e-12);
  expect_near(inputs[2].data, {0.51, -0.99}, 1e-12);
  reference_run_in_place(program, inputs);
  // second step: g' = g + 0.01 p; buf = 0.9 buf + g'.
  double p0 = 1 - 0.051, buf0 = 0.9 * 0.51 + (0.5 + 0.01 * p0);
  EXPECT_NEAR(inputs[2].data[0], buf0, 1e-12);
  EXPECT_NEAR(inputs[0].data[0], p0 - 0.1 * buf0, 1e-12);
}

TEST(Reference, AdamWFirstStepMovesByLearningRate) {
  ProgramBuilder b;
  ValueId p = b.param("p", {2}, DType::kF32, ir::constant_init(2.0));
  ValueId g = b.input("g", {2});
  ValueId m = b.buffer("m", {2}, DType::kF32, ir::zeros_init());
  ValueId v = b.buffer("v", {2}, DType::kF32, ir::zeros_init());
  std::vector<ValueId> hyper;
  for (const char* name : {"lr", "beta1", "beta2", "eps", "decay", "step"}) {
    hyper.push_back(b.input(name, {}));
  }
  for (ValueId r :
       b.adamw_update(p, g, m, v, hyper[0], hyper[1], hyper[2], hyper[3], hyper[4], hyper[5])) {
    b.output(r);
  }
  ir::Program program = b.build();
  HostTensorList inputs = initial_state(program);
  inputs[1] = f32({2}, {0.3, -4});
  std::vector<double> values = {0.01, 0.9, 0.999, 1e-8, 0.1, 1};
  for (size_t i = 0; i < values.size(); ++i) inputs[4 + i] = HostTensor::scalar(values[i]);
  HostTensorList out = reference_run_in_place(program, inputs);
  // Step 1: m_hat = g, v_hat = g^2, so the Adam term is sign(g) (up to eps).
  expect_near(inputs[0].data, {2 - 0.01 * (0.2 + 1), 2 - 0.01 * (0.2 - 1)}, 1e-9);
  expect_near(inputs[2].data, {0.03, -0.4}, 1e-12);
  expect_near(inputs[3].data, {0.001 * 0.09, 0.001 * 16}, 1e-12);
  expect_near(out[0].data, inputs[0].data, 0);
}

TEST(Reference, NonzeroAndPrint) {
  ProgramBuilder b;
  ValueId x = b.input("x", {2, 3});
  b.output(b.print(b.nonzero(x), "nz"));
  std::vector<std::string> printed;
  ReferenceOptions options;
  options.print_sink = [&](const std::string& text) { printed.push_back(text); };
  HostTensor out = reference_run(b.build(), {f32({2, 3}, {0, 3, 0, -1, 0, 2})}, options)[0];
  EXPECT_EQ(out.shape, (ir::Shape{3, 2}));
  expect_near(out.data, {0, 1, 1, 0, 1, 2});
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0], "nz: i64[3, 2] [0, 1, 1, 0, 1, 2]");
}

}  // namespace
}  // namespace grove::compiler::reference
