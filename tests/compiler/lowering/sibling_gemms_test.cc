// Note [Sibling GEMMs as one] (compiler/lowering/sibling_gemms.h): the q/k/v
// projections of an attention block and the three GEMMs of their backward
// (the weight gradients, and the input gradient summed over the three) become
// one GEMM each, and their bias gradients one sum; the rewritten program verifies, lowers to fewer
// library GEMMs and matches the float64 reference on every device, as the unfused one does.
#include "compiler/lowering/sibling_gemms.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::Program;
using compiler::ir::ProgramBuilder;
using compiler::ir::uniform_init;
using compiler::ir::ValueId;
using runtime::DType;

size_t count_op(const Program& program, const std::string& op) {
  size_t count = 0;
  for (const compiler::ir::Node& node : program.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

// x [rows, width] -> q, k, v (each [rows, width], read through reshapes of x
// as PyTorch's trace does), and the backward of the three given their
// gradients g_q, g_k, g_v: dW_i = g_i^T x, db_i = sum(g_i, 0), and
// dx = sum_i g_i W_i (an add tree through [batch, time, width] reshapes).
// heads > 0: the gradients come per head, [batch, heads, time, width / heads],
// and each g_i is their transpose reshaped, a copy (as in an attention block).
Program attention_projections(runtime::Device device, int64_t batch, int64_t time, int64_t width,
                              bool with_biases, int64_t heads = 0, bool permuted_weights = false) {
  ProgramBuilder b("qkv", device);
  const int64_t rows = batch * time;
  ValueId x = b.input("x", {batch, time, width});
  std::vector<ValueId> weights, biases, gradients;
  for (int i = 0; i < 3; ++i) {
    weights.push_back(
        b.param(str_cat("w", i), {width, width}, DType::kF32, uniform_init(-0.5, 0.5, 10 + i)));
    biases.push_back(with_biases ? b.param(str_cat("b", i), {width}, DType::kF32,
                                           uniform_init(-0.5, 0.5, 20 + i))
                                 : compiler::ir::kNoValue);
  }
  for (int i = 0; i < 3; ++i) {
    if (heads == 0) {
      gradients.push_back(b.input(str_cat("g", i), {rows, width}));
      continue;
    }
    ValueId per_head = b.input(str_cat("g", i), {batch, heads, time, width / heads});
    gradients.push_back(b.reshape(b.transpose(per_head, 1, 2), {rows, width}));
  }
  for (int i = 0; i < 3; ++i) {
    ValueId flat = b.reshape(x, {rows, width});
    b.output(b.reshape(b.linear(flat, weights[i], biases[i]), {batch, time, width}));
  }
  ValueId sum = compiler::ir::kNoValue;
  for (int i = 2; i >= 0; --i) {
    ValueId flat = b.reshape(x, {rows, width});
    b.output(b.transpose(b.matmul(b.transpose(gradients[i], 0, 1), flat), 0, 1));
    b.output(b.sum(gradients[i], {0}));
    // AOTAutograd saves a weight's transpose as permute [1, 0].
    ValueId weight_t =
        permuted_weights ? b.permute(weights[i], {1, 0}) : b.transpose(weights[i], 0, 1);
    ValueId dx =
        b.reshape(b.linear(gradients[i], weight_t, compiler::ir::kNoValue), {batch, time, width});
    sum = sum == compiler::ir::kNoValue ? dx : b.add(sum, dx);
  }
  b.output(sum);
  return b.build();
}

TEST(SiblingGemms, QkvAndTheirGradientsBecomeThreeGemms) {
  Program program = attention_projections(runtime::kSimDevice, 2, 8, 16, true);
  std::optional<Program> fused = compiler::lowering::fuse_sibling_gemms(program);
  ASSERT_TRUE(fused.has_value());
  fused->verify();
  EXPECT_EQ(fused->inputs().size(), program.inputs().size());
  EXPECT_EQ(fused->outputs().size(), program.outputs().size());
  EXPECT_EQ(count_op(program, "linear") + count_op(program, "matmul"), 9u);
  EXPECT_EQ(count_op(*fused, "linear") + count_op(*fused, "matmul"), 3u) << fused->str();
  EXPECT_EQ(count_op(*fused, "add"), 0u) << fused->str();
  EXPECT_EQ(count_op(*fused, "sum"), 1u) << fused->str();  // the three bias gradients
  // The weights' concat is made once for the forward and the input gradient.
  EXPECT_EQ(count_op(*fused, "concat"), 3u) << fused->str();  // weights, biases, gradients

  testing::ScopedEnv off("GROVE_FUSE_SIBLING_GEMMS", "0");  // the unfused lowering
  compiler::lowering::LoweredProgram before = compiler::lowering::lower(program);
  compiler::lowering::LoweredProgram after = compiler::lowering::lower(*fused);
  EXPECT_EQ(before.kernel_report().library_gemms, 9u) << before.describe();
  EXPECT_EQ(after.kernel_report().library_gemms, 3u) << after.describe();
}

// The door's backward (AOTAutograd's partition) reads each weight through a
// saved permute [1, 0]: its input gradient is one GEMM too.
TEST(SiblingGemms, InputGradientThroughPermutedWeightsIsOneGemm) {
  Program program = attention_projections(runtime::kSimDevice, 2, 8, 16, true, 0, true);
  std::optional<Program> fused = compiler::lowering::fuse_sibling_gemms(program);
  ASSERT_TRUE(fused.has_value());
  fused->verify();
  EXPECT_EQ(count_op(*fused, "linear") + count_op(*fused, "matmul"), 3u) << fused->str();
  EXPECT_EQ(count_op(*fused, "add"), 0u) << fused->str();
  testing::HostTensorList inputs = testing::random_inputs(program, 41);
  testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
  testing::expect_matches_reference(program, inputs, runtime::kSimDevice,
                                    testing::tolerance_for(DType::kF32), "qkv_permuted");
}

TEST(SiblingGemms, TheSwitchRewritesWhatLowerSchedules) {
  Program program = attention_projections(runtime::kSimDevice, 2, 8, 16, false);
  {
    testing::ScopedEnv off("GROVE_FUSE_SIBLING_GEMMS", "0");
    EXPECT_EQ(compiler::lowering::lower(program).kernel_report().library_gemms, 9u);
  }
  testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
  EXPECT_EQ(compiler::lowering::lower(program).kernel_report().library_gemms, 3u);
}

// Note [Gradient concats read the heads] (sibling_gemms.cc): one concat kernel
// reads the three transposed gradients, where each was first copied.
TEST(SiblingGemms, GradientConcatReadsTheHeadsWithoutCopies) {
  Program program = attention_projections(runtime::kSimDevice, 2, 8, 16, true, 4);
  testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
  size_t with_copies = 0;
  {
    testing::ScopedEnv off("GROVE_SIBLING_CONCAT_SOURCES", "0");
    with_copies = compiler::lowering::lower(program).kernel_report().kernels.size();
  }
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
  EXPECT_EQ(lowered.kernel_report().library_gemms, 3u) << lowered.describe();
  EXPECT_EQ(lowered.kernel_report().kernels.size() + 3, with_copies) << lowered.describe();
}

// q/k/v of x [rows, width] alone (an inference forward) on `device`.
Program forward_projections(runtime::Device device, int64_t rows, int64_t width) {
  ProgramBuilder b("qkv_forward", device);
  ValueId x = b.input("x", {rows, width});
  for (int i = 0; i < 3; ++i) {
    ValueId w =
        b.param(str_cat("w", i), {width, width}, DType::kF32, uniform_init(-0.5, 0.5, 10 + i));
    b.output(b.linear(x, w, compiler::ir::kNoValue));
  }
  return b.build();
}

// Note [Wide sibling GEMMs of inference on cuda]: unset, the switch fuses the
// forward groups of inference programs on cuda whose x has more than 64 rows
// and whose weights are small; "1" everything everywhere, "0" nothing.
TEST(SiblingGemms, WideForwardGroupsOfCudaInferenceByDefault) {
  using compiler::lowering::SiblingGemmScope;
  {
    testing::ScopedEnv unset("GROVE_FUSE_SIBLING_GEMMS", "");
    EXPECT_EQ(compiler::lowering::sibling_gemm_scope(), SiblingGemmScope::kWideInferenceForward);
  }
  {
    testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
    EXPECT_EQ(compiler::lowering::sibling_gemm_scope(), SiblingGemmScope::kAll);
  }
  {
    testing::ScopedEnv off("GROVE_FUSE_SIBLING_GEMMS", "0");
    EXPECT_EQ(compiler::lowering::sibling_gemm_scope(), SiblingGemmScope::kNone);
  }
  auto fused_linears = [](const Program& program, SiblingGemmScope scope) -> int {
    std::optional<Program> fused = compiler::lowering::fuse_sibling_gemms(program, scope);
    if (!fused) return -1;
    fused->verify();
    return static_cast<int>(count_op(*fused, "linear"));
  };
  const auto wide = SiblingGemmScope::kWideInferenceForward;
  EXPECT_EQ(fused_linears(forward_projections(runtime::kCudaDevice, 128, 64), wide), 1);
  EXPECT_EQ(fused_linears(forward_projections(runtime::kCudaDevice, 64, 64), wide), -1);  // rows
  EXPECT_EQ(fused_linears(forward_projections(runtime::kSimDevice, 128, 64), wide), -1);
  // 3 x 1024 x 1024 f32 weights: 12 MiB, more than kMaxWideSiblingWeightBytes.
  EXPECT_EQ(fused_linears(forward_projections(runtime::kCudaDevice, 128, 1024), wide), -1);
  EXPECT_EQ(
      fused_linears(forward_projections(runtime::kCudaDevice, 128, 1024), SiblingGemmScope::kAll),
      1);
  // A training program (gradient groups) is left alone unless every group is asked for.
  Program training = attention_projections(runtime::kCudaDevice, 8, 16, 16, true);
  EXPECT_EQ(fused_linears(training, wide), -1);
  EXPECT_GE(fused_linears(training, SiblingGemmScope::kAll), 0);
  EXPECT_EQ(
      fused_linears(forward_projections(runtime::kCudaDevice, 128, 64), SiblingGemmScope::kNone),
      -1);
  // One wide group and one narrow group: the narrow one's linears stay as they were.
  ProgramBuilder b("two_groups", runtime::kCudaDevice);
  ValueId wide_x = b.input("wide_x", {128, 64});
  ValueId narrow_x = b.input("narrow_x", {16, 64});
  for (int i = 0; i < 4; ++i) {
    ValueId w = b.param(str_cat("w", i), {64, 64}, DType::kF32, uniform_init(-0.5, 0.5, 30 + i));
    b.output(b.linear(i < 2 ? wide_x : narrow_x, w, compiler::ir::kNoValue));
  }
  Program two_groups = b.build();
  std::optional<Program> fused = compiler::lowering::fuse_sibling_gemms(two_groups, wide);
  ASSERT_TRUE(fused.has_value());
  fused->verify();
  EXPECT_EQ(count_op(*fused, "linear"), 3u) << fused->str();  // the wide pair's one, the narrow two
  EXPECT_EQ(fused->outputs().size(), 4u);
}

TEST(SiblingGemms, BadSwitchValueIsRefusedByName) {
  testing::ScopedEnv bad("GROVE_FUSE_SIBLING_GEMMS", "yes");
  try {
    compiler::lowering::sibling_gemm_fusion_enabled();
    FAIL() << "GROVE_FUSE_SIBLING_GEMMS=yes was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("GROVE_FUSE_SIBLING_GEMMS"), std::string::npos);
  }
}

TEST(SiblingGemms, LoneLinearsAndInPlaceProgramsAreLeftAlone) {
  ProgramBuilder lone("lone", runtime::kSimDevice);
  ValueId x = lone.input("x", {4, 8});
  ValueId w = lone.param("w", {8, 8}, DType::kF32, uniform_init(-1, 1, 1));
  ValueId other = lone.param("other", {8, 8}, DType::kF32, uniform_init(-1, 1, 2));
  lone.output(lone.linear(x, w, compiler::ir::kNoValue));
  // Another input: not a sibling of the first linear.
  lone.output(lone.linear(lone.input("y", {4, 8}), other, compiler::ir::kNoValue));
  EXPECT_FALSE(compiler::lowering::fuse_sibling_gemms(lone.build()).has_value());

  ProgramBuilder in_place("in_place", runtime::kSimDevice);
  ValueId input = in_place.input("x", {4, 8});
  ValueId w0 = in_place.param("w0", {8, 8}, DType::kF32, uniform_init(-1, 1, 3));
  ValueId w1 = in_place.param("w1", {8, 8}, DType::kF32, uniform_init(-1, 1, 4));
  ValueId state = in_place.buffer("state", {4, 8}, DType::kF32, uniform_init(-1, 1, 5));
  ValueId y0 = in_place.linear(input, w0, compiler::ir::kNoValue);
  in_place.output(in_place.copy_into(state, y0));
  in_place.output(in_place.linear(input, w1, compiler::ir::kNoValue));
  EXPECT_FALSE(compiler::lowering::fuse_sibling_gemms(in_place.build()).has_value());
}

// Two weight-gradient GEMMs over one X where the second's gradient is made
// from the first's result: one GEMM cannot compute both, so the program is
// left alone (and lowers as before).
TEST(SiblingGemms, GemmsThatFeedEachOtherAreLeftAlone) {
  ProgramBuilder b("chained", runtime::kSimDevice);
  ValueId x = b.input("x", {4, 8});
  ValueId g1 = b.input("g1", {4, 6});
  ValueId first = b.matmul(b.transpose(g1, 0, 1), x);   // [6, 8]
  ValueId g2 = b.matmul(x, b.transpose(first, 0, 1));   // [4, 6]
  ValueId second = b.matmul(b.transpose(g2, 0, 1), x);  // [6, 8]
  b.output(first);
  b.output(second);
  Program program = b.build();
  EXPECT_FALSE(compiler::lowering::fuse_sibling_gemms(program).has_value());
  testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
  EXPECT_EQ(compiler::lowering::lower(program).kernel_report().library_gemms, 3u);
}

class SiblingGemmsOnDevice : public testing::DeviceTest {};

// The cuda instance runs the fused GEMMs through cuBLAS (the lead runs it).
TEST_P(SiblingGemmsOnDevice, FusedProgramMatchesTheReference) {
  for (bool biases : {true, false}) {
    for (int64_t heads : {0, 4}) {
      SCOPED_TRACE(str_cat(biases ? "with biases" : "without biases", ", heads ", heads));
      Program program = attention_projections(device(), 4, 16, 32, biases, heads);
      testing::HostTensorList inputs = testing::random_inputs(program, 31);
      testing::ScopedEnv on("GROVE_FUSE_SIBLING_GEMMS", "1");
      testing::expect_matches_reference(program, inputs, device(),
                                        testing::tolerance_for(DType::kF32), "qkv_fused");
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(SiblingGemmsOnDevice);

}  // namespace
}  // namespace grove
