// The fused attention kernel (Note [Fused attention kernel]) against the
// float64 reference (Note [Fused attention op]) on sim, and on cuda when a
// device is present; its PTX assembles for sm_90 without spills.
#include "compiler/lowering/attention_kernel.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "compiler/codegen/codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "compiler/lowering/scheduler.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;

struct AttentionCase {
  std::string label;
  std::function<void(ProgramBuilder&, DType)> build;
};

ValueId attend(ProgramBuilder& b, std::vector<ValueId> operands, double scale, int64_t causal = 0) {
  return b.op1("attention", operands, {{"scale", scale}, {"causal", causal}});
}

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> all;
  all.push_back({"plain_two_chunks", [](ProgramBuilder& b, DType t) {
                   // 64 value features: two rows per query (two chunks of 32).
                   ValueId q = b.input("q", {2, 3, 5, 16}, t);
                   ValueId k = b.input("k", {2, 3, 7, 16}, t);
                   ValueId v = b.input("v", {2, 3, 7, 64}, t);
                   b.output(attend(b, {q, k, v}, 0.25));
                 }});
  all.push_back({"causal_grouped_query", [](ProgramBuilder& b, DType t) {
                   // Four query heads over two key heads, the causal triangle.
                   ValueId q = b.input("q", {1, 4, 6, 8}, t);
                   ValueId k = b.input("k", {1, 2, 6, 8}, t);
                   ValueId v = b.input("v", {1, 2, 6, 12}, t);
                   b.output(attend(b, {q, k, v}, 0.3, 1));
                 }});
  all.push_back(
      {"bool_mask_with_a_fully_masked_row", [](ProgramBuilder& b, DType t) {
         // [B, 1, Tq, Tk] mask from a comparison; row 0 of batch 0 masks
         // every key (x < -10 never holds... so it is built by where).
         ValueId q = b.input("q", {2, 2, 4, 8}, t);
         ValueId k = b.input("k", {2, 2, 5, 8}, t);
         ValueId v = b.input("v", {2, 2, 5, 8}, t);
         ValueId m = b.input("m", {2, 1, 4, 5}, DType::kF32);
         ValueId keep = b.compare("gt", m, b.full(-1.0));
         ValueId first_row = b.compare("lt", b.input("r", {2, 1, 4, 1}, DType::kF32), b.full(-1.5));
         keep = b.where(first_row, b.compare("gt", m, b.full(100.0)), keep);
         b.output(attend(b, {q, k, v, keep}, 0.5));
       }});
  all.push_back({"additive_mask_broadcast", [](ProgramBuilder& b, DType t) {
                   // A padding mask [B, 1, 1, Tk] added to the scores.
                   ValueId q = b.input("q", {3, 2, 4, 8}, t);
                   ValueId k = b.input("k", {3, 2, 6, 8}, t);
                   ValueId v = b.input("v", {3, 2, 6, 10}, t);
                   ValueId mask = b.input("mask", {3, 1, 1, 6}, t);
                   b.output(attend(b, {q, k, v, mask}, 0.35));
                 }});
  all.push_back({"heads_split_from_one_projection", [](ProgramBuilder& b, DType t) {
                   // q, k, v are strided views of one [B, T, 3 * H * D] tensor,
                   // as a fused QKV projection's result is.
                   ValueId qkv = b.input("qkv", {2, 5, 3 * 2 * 8}, t);
                   auto head_view = [&](int64_t part) {
                     ValueId slice = b.slice(qkv, 2, part * 16, (part + 1) * 16);
                     return b.transpose(b.reshape(slice, {2, 5, 2, 8}), 1, 2);
                   };
                   ValueId mixed = attend(b, {head_view(0), head_view(1), head_view(2)}, 0.4, 1);
                   b.output(b.reshape(b.transpose(mixed, 1, 2), {2, 5, 16}));
                 }});
  all.push_back({"wide_rows", [](ProgramBuilder& b, DType t) {
                   // 1024 query rows: each row computes all 64 value features.
                   ValueId q = b.input("q", {4, 4, 64, 16}, t);
                   ValueId k = b.input("k", {4, 4, 9, 16}, t);
                   ValueId v = b.input("v", {4, 4, 9, 64}, t);
                   b.output(attend(b, {q, k, v}, 0.25, 1));
                 }});
  all.push_back({"one_tensor_for_query_key_value", [](ProgramBuilder& b, DType t) {
                   ValueId x = b.input("x", {2, 3, 5, 8}, t);
                   b.output(attend(b, {x, x, x}, 0.3));
                 }});
  return all;
}

// Lowering options that keep every attention on the generated kernel.
compiler::lowering::LowerOptions generated_kernel() {
  compiler::lowering::LowerOptions options;
  options.sequence_attention = false;
  return options;
}

void expect_cases_match(runtime::Device device, uint32_t seed,
                        const compiler::lowering::LowerOptions& options) {
  for (const AttentionCase& c : cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string label =
          c.label + "/" + runtime::dtype_name(dtype) + " seed " + std::to_string(seed);
      SCOPED_TRACE(label);
      ProgramBuilder builder(c.label, device);
      c.build(builder, dtype);
      compiler::ir::Program program = builder.build();
      testing::HostTensorList inputs = testing::random_inputs(program, seed++);
      testing::expect_matches_reference(program, inputs, device, testing::tolerance_for(dtype),
                                        label, options);
    }
  }
}

TEST(AttentionKernel, MatchesTheReferenceOnSim) {
  expect_cases_match(runtime::kSimDevice, 20261126, generated_kernel());
}

TEST(AttentionKernel, MatchesTheReferenceOnCuda) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  expect_cases_match(runtime::kCudaDevice, 20261127, generated_kernel());
}

// Note [Keys and values by position].
TEST(AttentionKernel, IsOneCopyAndOneKernelPerAttention) {
  ProgramBuilder b("one_kernel", runtime::kSimDevice);
  ValueId q = b.input("q", {1, 4, 32, 64}, DType::kF32);
  ValueId k = b.input("k", {1, 4, 32, 64}, DType::kF32);
  ValueId v = b.input("v", {1, 4, 32, 64}, DType::kF32);
  b.output(attend(b, {q, k, v}, 0.125, 1));
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  options.sequence_attention = false;
  compiler::lowering::ScheduledProgram scheduled =
      compiler::lowering::schedule_program(b.build(), options);
  std::vector<std::string> kernels;
  for (const compiler::lowering::Step& step : scheduled.steps) {
    if (step.kind == compiler::lowering::StepKind::kKernel) {
      kernels.push_back(step.kernel.spec.name);
      if (step.kernel.spec.name == "fused_attention") {
        EXPECT_EQ(step.kernel.spec.row_count(), 4 * 32 * 2);  // two chunks of 32 features
      } else {
        EXPECT_EQ(step.kernel.output_slots.size(), 2u);  // key and value in one copy
      }
    }
    EXPECT_NE(step.kind, compiler::lowering::StepKind::kGemm);
  }
  EXPECT_EQ(kernels, (std::vector<std::string>{"positions_major_copy", "fused_attention"}));
}

// Steps of `kind` in `program` (sim, kernels not loaded).
int steps_of(const compiler::ir::Program& program, compiler::lowering::StepKind kind,
             bool sequence_attention) {
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  options.sequence_attention = sequence_attention;
  int count = 0;
  for (const compiler::lowering::Step& step :
       compiler::lowering::schedule_program(program, options).steps) {
    count += step.kind == kind ? 1 : 0;
  }
  return count;
}

int kernel_steps(const compiler::ir::Program& program) {
  return steps_of(program, compiler::lowering::StepKind::kKernel, /*sequence_attention=*/false);
}

// Note [Attention results with heads last].
TEST(AttentionKernel, HeadsMergedBackCostNoCopy) {
  // (readers of the result, kernel steps): heads last when every reader is the
  // same transpose (however its dims are spelled): the merges are views;
  // contiguous when the result is also an output or readers differ: each
  // merge copies.
  enum Readers { kTransposes, kTransposeAndOutput, kTransposeAndPermute };
  // (Each also copies key and value, of two shapes here, in two kernels: Note
  // [Keys and values by position].)
  for (auto [readers, kernels] : {std::pair{kTransposes, 3}, std::pair{kTransposeAndOutput, 4},
                                  std::pair{kTransposeAndPermute, 5}}) {
    SCOPED_TRACE(readers);
    ProgramBuilder b("merge_heads", runtime::kSimDevice);
    ValueId q = b.input("q", {2, 3, 5, 8}, DType::kF32);
    ValueId k = b.input("k", {2, 3, 7, 8}, DType::kF32);
    ValueId v = b.input("v", {2, 3, 7, 4}, DType::kF32);
    ValueId mixed = attend(b, {q, k, v}, 0.3);
    b.output(b.reshape(b.transpose(mixed, 1, 2), {2, 5, 12}));
    if (readers == kTransposes) b.output(b.reshape(b.transpose(mixed, -2, -3), {10, 12}));
    if (readers == kTransposeAndOutput) b.output(mixed);
    if (readers == kTransposeAndPermute) {
      b.output(b.reshape(b.permute(mixed, {2, 0, 1, 3}), {5, 24}));
    }
    compiler::ir::Program program = b.build();
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261128),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      "merge_heads", generated_kernel());
    EXPECT_EQ(kernel_steps(program), kernels);
  }
}

// Note [Fused attention op]: operands it cannot take are errors naming them.
TEST(AttentionKernel, OperandsItCannotTakeAreClearErrors) {
  auto message = [](const std::function<void(ProgramBuilder&)>& build) {
    ProgramBuilder b("bad", runtime::kSimDevice);
    try {
      build(b);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  auto f32 = [](ProgramBuilder& b, const char* name, runtime::Shape shape) {
    return b.input(name, shape, DType::kF32);
  };
  EXPECT_NE(
      message([&](ProgramBuilder& b) {
        attend(b, {f32(b, "q", {1, 3, 4, 8}), f32(b, "k", {1, 2, 4, 8}), f32(b, "v", {1, 2, 4, 8})},
               0.5);
      }).find("head count that divides"),
      std::string::npos);
  EXPECT_NE(
      message([&](ProgramBuilder& b) {
        attend(b, {f32(b, "q", {1, 2, 4, 0}), f32(b, "k", {1, 2, 4, 0}), f32(b, "v", {1, 2, 4, 8})},
               0.5);
      }).find("at least one feature"),
      std::string::npos);
  EXPECT_NE(message([&](ProgramBuilder& b) {
              attend(b,
                     {f32(b, "q", {1, 2, 4, 8}), f32(b, "k", {1, 2, 5, 8}),
                      f32(b, "v", {1, 2, 5, 8}), b.input("m", {4, 5}, DType::kI32)},
                     0.5);
            }).find("the mask must be bool or query's dtype"),
            std::string::npos);
  EXPECT_NE(message([&](ProgramBuilder& b) {
              attend(b,
                     {f32(b, "q", {1, 2, 4, 8}), f32(b, "k", {1, 2, 5, 8}),
                      f32(b, "v", {1, 2, 5, 8}), f32(b, "m", {4, 4})},
                     0.5);
            }).find("must broadcast to the scores' shape"),
            std::string::npos);
}

TEST(AttentionKernel, FeaturesPerRowDivideTheValueFeatures) {
  using compiler::lowering::attention_features_per_row;
  EXPECT_EQ(attention_features_per_row(64, 128), 32);  // few rows: more, narrower ones
  EXPECT_EQ(attention_features_per_row(64, 2048), 64);
  EXPECT_EQ(attention_features_per_row(128, 2048), 64);
  EXPECT_EQ(attention_features_per_row(32, 128), 32);
  EXPECT_EQ(attention_features_per_row(40, 128), 20);
  EXPECT_EQ(attention_features_per_row(37, 128), 1);
  EXPECT_EQ(attention_features_per_row(12, 128), 12);
}

TEST(AttentionKernel, PtxAssemblesForSm90WithoutSpills) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::ifstream(ptxas).good()) GTEST_SKIP() << ptxas << " not found: skipping ptxas";
  for (int64_t batch : {1, 16}) {  // rows of 32 and of 64 features
    SCOPED_TRACE(batch);
    ProgramBuilder b("ptx", runtime::kCudaDevice);
    ValueId q = b.input("q", {batch, 4, 32, 64}, DType::kF32);
    ValueId k = b.input("k", {batch, 4, 32, 64}, DType::kF32);
    ValueId v = b.input("v", {batch, 4, 32, 64}, DType::kF32);
    ValueId mask = b.input("mask", {batch, 1, 1, 32}, DType::kF32);
    b.output(attend(b, {q, k, v, mask}, 0.125, 1));
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    options.sequence_attention = false;
    compiler::lowering::ScheduledProgram scheduled =
        compiler::lowering::schedule_program(b.build(), options);
    const std::string dir = ::testing::TempDir();
    int assembled = 0;
    for (const compiler::lowering::Step& step : scheduled.steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel) continue;
      std::ofstream(dir + "/attention.ptx") << compiler::codegen::emit_ptx(step.kernel.spec);
      const std::string log = dir + "/ptxas.txt";
      const std::string command = std::string(ptxas) + " -v -arch=sm_90 -o " + dir +
                                  "/attention.cubin " + dir + "/attention.ptx > " + log + " 2>&1";
      ASSERT_EQ(std::system(command.c_str()), 0) << "ptxas rejected " << step.kernel.spec.name;
      std::ifstream in(log);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      EXPECT_NE(text.find(" 0 bytes spill stores"), std::string::npos) << text;
      ++assembled;
    }
    EXPECT_EQ(assembled, 2);  // the copy of key and value, the attention
  }
}

// Note [Attention on the sequence attention kernel]: the same cases on the
// runtime's sequence attention kernel (every one fits it).
TEST(AttentionLowering, SequenceKernelMatchesTheReferenceOnSim) {
  expect_cases_match(runtime::kSimDevice, 20261129, {});
}

TEST(AttentionLowering, SequenceKernelMatchesTheReferenceOnCuda) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  expect_cases_match(runtime::kCudaDevice, 20261130, {});
}

// Heads split out of one fused projection and merged back after: one launch,
// no copy kernel and no GEMM (the views are read and written in place).
TEST(AttentionLowering, FusedProjectionHeadsAreOneLaunchWithNoCopies) {
  for (int64_t batch : {1, 16}) {
    SCOPED_TRACE(batch);
    ProgramBuilder b("projection_heads", runtime::kSimDevice);
    ValueId qkv = b.input("qkv", {batch, 32, 3 * 4 * 64}, DType::kF32);
    auto head_view = [&](int64_t part) {
      ValueId slice = b.slice(qkv, 2, part * 256, (part + 1) * 256);
      return b.transpose(b.reshape(slice, {batch, 32, 4, 64}), 1, 2);
    };
    ValueId mixed = attend(b, {head_view(0), head_view(1), head_view(2)}, 0.125, 1);
    b.output(b.reshape(b.transpose(mixed, 1, 2), {batch, 32, 256}));
    compiler::ir::Program program = b.build();
    using compiler::lowering::StepKind;
    EXPECT_EQ(steps_of(program, StepKind::kLaunch, true), 1);
    EXPECT_EQ(steps_of(program, StepKind::kKernel, true), 0);
    EXPECT_EQ(steps_of(program, StepKind::kGemm, true), 0);
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261131),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      "projection_heads");
  }
}

// Keys past what the sequence kernel's shared memory holds: the generated
// kernel runs instead, and the result still matches.
TEST(AttentionLowering, LongSequencesRunTheGeneratedKernel) {
  ProgramBuilder b("long", runtime::kSimDevice);
  ValueId q = b.input("q", {1, 2, 4, 64}, DType::kF32);
  ValueId k = b.input("k", {1, 2, 300, 64}, DType::kF32);
  ValueId v = b.input("v", {1, 2, 300, 64}, DType::kF32);
  b.output(attend(b, {q, k, v}, 0.125));
  compiler::ir::Program program = b.build();
  using compiler::lowering::StepKind;
  EXPECT_EQ(steps_of(program, StepKind::kLaunch, true), 0);
  EXPECT_EQ(steps_of(program, StepKind::kKernel, true), 2);  // the copy, the generated kernel
  testing::expect_matches_reference(program, testing::random_inputs(program, 20261132),
                                    runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                    "long");
}

// Note [Kernel results laid out for a transposed reshape]: an elementwise and
// a row-reduction result, each read only through transpose(1, 2) flattened to
// rows for a GEMM (MLP-Mixer's token mixing), are written transposed: the
// reshape is a view and no copy kernel runs. Where the reshape could view the
// contiguous result anyway, the layout stays contiguous.
TEST(Kernels, ResultsReadTransposedByAReshapeAreWrittenTransposed) {
  using compiler::lowering::StepKind;
  for (bool reduction : {false, true}) {
    SCOPED_TRACE(reduction);
    ProgramBuilder b("token_mixing", runtime::kSimDevice);
    ValueId x = b.input("x", {2, 4, 8}, DType::kF32);
    ValueId w = b.input("w", {4, 3}, DType::kF32);
    ValueId y = reduction ? b.softmax(x, -1) : b.add(b.mul(x, b.full(2.0)), b.full(1.0));
    ValueId rows = b.reshape(b.transpose(y, 1, 2), {16, 4});
    b.output(b.matmul(rows, w));
    compiler::ir::Program program = b.build();
    EXPECT_EQ(steps_of(program, StepKind::kKernel, true), 1);  // the kernel of y, no copy
    EXPECT_EQ(steps_of(program, StepKind::kGemm, true), 1);
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261133),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      "token_mixing");
  }
  ProgramBuilder b("viewable", runtime::kSimDevice);
  ValueId x = b.input("x", {2, 1, 8}, DType::kF32);  // transpose(1, 2) of [2, 1, 8] is a view
  ValueId y = b.add(x, b.full(1.0));
  b.output(b.reshape(b.transpose(y, 1, 2), {16}));
  compiler::ir::Program program = b.build();
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  compiler::lowering::ScheduledProgram scheduled =
      compiler::lowering::schedule_program(program, options);
  for (const compiler::lowering::Step& step : scheduled.steps) {
    if (step.kind == StepKind::kKernel) {
      EXPECT_TRUE(
          scheduled.slots[static_cast<size_t>(step.kernel.output_slots[0])].layout.is_contiguous());
    }
  }
}

}  // namespace
}  // namespace grove
