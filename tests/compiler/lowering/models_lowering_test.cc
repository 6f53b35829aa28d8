// The benchmark models: fusion groups and kernel counts, and end-to-end runs
// on sim against the float64 reference.
#include <gtest/gtest.h>

#include <map>

#include "compiler/lowering/lower.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::lowering::KernelReport;
using compiler::lowering::LoweredProgram;
using runtime::kSimDevice;

compiler::ir::Program load(const std::string& name, const std::map<std::string, int64_t>& dims) {
  return compiler::model_format::load_model_file("benchmarks/models/" + name + ".json", dims,
                                                 kSimDevice);
}

std::map<std::string, int> histogram(const KernelReport& report) {
  std::map<std::string, int> counts;
  for (const std::string& name : report.kernels) ++counts[name];
  return counts;
}

// mlp16x512: each layer is one GEMM whose epilogue adds the bias and applies
// gelu (Note [GEMM epilogues in lowering]): no generated kernel at all.
TEST(ModelFusion, Mlp16x512LaunchesSixteenGemmsWithBiasGeluEpiloguesAndNoKernel) {
  for (int64_t batch : {1, 256}) {
    LoweredProgram lowered = compiler::lowering::lower(load("mlp16x512", {{"batch", batch}}));
    KernelReport report = lowered.kernel_report();
    EXPECT_EQ(report.library_gemms, 16u) << report.str();
    EXPECT_EQ(report.kernels.size(), 0u) << report.str();
    EXPECT_EQ(report.launches(), 16u);
    ASSERT_EQ(lowered.function().segments.size(), 1u);
    EXPECT_TRUE(lowered.function().segments[0].capturable());
    EXPECT_EQ(lowered.function().segments[0].kernel_count, 0u);
    EXPECT_EQ(lowered.function().segments[0].gemm_count, 16u);
    std::string description = lowered.describe();
    size_t epilogues = 0;
    for (size_t at = description.find("+bias_gelu"); at != std::string::npos;
         at = description.find("+bias_gelu", at + 1)) {
      ++epilogues;
    }
    EXPECT_EQ(epilogues, 16u) << description;
  }
}

// gpt4x256 at batch 1: per block 5 kernels and 8 GEMMs.
//   kernels: ln1; mul(scale) + where(mask) + softmax as one reduction kernel
//   with its prologue; the residual add after the out-proj; ln2; the residual
//   add after proj. The context GEMM writes the heads where merging them back
//   is a view (Note [Attention results with heads last]: no copy at batch 1). The bias adds of q,
//   k, v, out-proj and proj are GEMM epilogues, and fc's bias + gelu is one (Note [GEMM epilogues
//   in lowering]). GEMMs: q, k, v, scores (one strided batch over heads), context, out, fc, proj.
// Plus embedding + position add (one kernel) and lm_head (a GEMM without
// bias). The last block's residual add is read only by ln_f, so it becomes
// ln_f's prologue (residual + ln_f: one kernel). Total 21 kernels, 33 GEMMs
// with GROVE_FUSE_REDUCTION_PROLOGUES=0; by default every residual add also
// read elsewhere runs inside the next layer_norm's kernel, which writes it
// (Note [Reduction prologues]): 13 kernels (ReductionPrologueModels below).
TEST(ModelFusion, Gpt4x256LaunchesTwentyOneKernelsAndThirtyThreeGemms) {
  testing::ScopedEnv off("GROVE_FUSE_REDUCTION_PROLOGUES", "0");
  LoweredProgram lowered = compiler::lowering::lower(load("gpt4x256", {{"batch", 1}, {"seq", 32}}));
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.kernels.size(), 21u) << report.str();
  EXPECT_EQ(report.library_gemms, 33u) << report.str();
  std::map<std::string, int> counts = histogram(report);
  EXPECT_EQ(counts["embedding_add"], 1) << report.str();
  EXPECT_EQ(counts["layer_norm"], 8) << report.str();
  EXPECT_EQ(counts["add_layer_norm"], 1) << report.str();
  EXPECT_EQ(counts["mul_where_softmax"], 4) << report.str();
  EXPECT_EQ(counts["copy"], 0) << report.str();
  EXPECT_EQ(counts["add"], 7) << report.str();
  ASSERT_EQ(lowered.function().segments.size(), 1u);
  EXPECT_TRUE(lowered.function().segments[0].capturable());
}

TEST(ModelFusion, Gpt4x256ResidualAddsRunInsideTheirLayerNormsThirteenKernels) {
  testing::ScopedEnv on("GROVE_FUSE_REDUCTION_PROLOGUES", "1");  // off by default
  LoweredProgram lowered = compiler::lowering::lower(load("gpt4x256", {{"batch", 1}, {"seq", 32}}));
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.kernels.size(), 13u) << report.str();
  EXPECT_EQ(report.library_gemms, 33u) << report.str();
  std::map<std::string, int> counts = histogram(report);
  EXPECT_EQ(counts["embedding_add_layer_norm"], 1) << report.str();
  EXPECT_EQ(counts["add_layer_norm"], 8) << report.str();
  EXPECT_EQ(counts["mul_where_softmax"], 4) << report.str();
  EXPECT_EQ(counts["copy"], 0) << report.str();
}

// At batch 8 the heads of q, k and v are strided unevenly across the batch
// (Note [Copies instead of GEMM loops]): each is copied contiguous once, and
// scores and context stay one strided-batched GEMM each instead of a loop of
// 8, so the GEMM count is the same as at batch 1.
TEST(ModelFusion, Gpt4x256AtBatchEightCopiesTheHeadsInsteadOfLoopingGemms) {
  LoweredProgram lowered = compiler::lowering::lower(load("gpt4x256", {{"batch", 8}, {"seq", 32}}));
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 33u) << report.str();
  std::map<std::string, int> counts = histogram(report);
  EXPECT_EQ(counts["copy"], 4 * 4) << report.str();
}

TEST(ModelEndToEnd, Mlp16x512OnSimMatchesTheReference) {
  compiler::ir::Program program = load("mlp16x512", {{"batch", 3}});
  testing::HostTensorList inputs = testing::random_inputs(program, 4242);
  testing::expect_matches_reference(program, inputs, kSimDevice, {2e-3, 1e-4}, "mlp16x512");
}

TEST(ModelEndToEnd, Gpt4x256OnSimMatchesTheReference) {
  for (int64_t batch : {1, 2}) {
    compiler::ir::Program program = load("gpt4x256", {{"batch", batch}, {"seq", 8}});
    testing::InputRanges ranges;
    ranges.int_high = 512;  // token ids
    testing::HostTensorList inputs = testing::random_inputs(program, 777 + batch, ranges);
    testing::expect_matches_reference(program, inputs, kSimDevice, {2e-3, 2e-4},
                                      "gpt4x256 batch " + std::to_string(batch));
  }
}

// The lowered function never synchronizes or reads device memory: it can be
// captured whole on sim, and replaying the graph recomputes from the inputs.
TEST(ModelEndToEnd, LoweredMlpIsCapturedOnSimAndItsReplayMatchesEagerRuns) {
  compiler::ir::Program program = load("mlp16x512", {{"batch", 2}});
  LoweredProgram lowered = compiler::lowering::lower(program);
  runtime::DeviceContext& context = runtime::device_context(kSimDevice);
  runtime::StreamHandle stream = context.create_stream();
  runtime::StreamGuard guard(kSimDevice, stream);
  runtime::PoolId pool = context.allocator().create_pool();

  testing::HostTensorList first = testing::random_inputs(program, 11);
  testing::HostTensorList second = testing::random_inputs(program, 12);
  compiler::TensorList inputs;
  for (const auto& input : first) inputs.push_back(testing::to_device(input, kSimDevice));
  compiler::TensorList outputs;
  {
    runtime::GraphRecording recording(kSimDevice);
    recording.capture_begin(stream, pool);
    outputs = lowered.function().call(inputs);
    recording.capture_end();
    recording.instantiate();
    // Overwrite the input in place, replay, compare with an eager call.
    compiler::TensorList fresh;
    for (const auto& input : second) fresh.push_back(testing::to_device(input, kSimDevice));
    std::vector<uint8_t> bytes = fresh[0].to_host_bytes();
    inputs[0].copy_from_host(bytes.data());
    recording.replay(stream);
    compiler::TensorList eager = lowered.function().call(fresh);
    std::string why;
    EXPECT_TRUE(testing::all_close(testing::to_host(outputs[0]), testing::to_host(eager[0]),
                                   {1e-6, 1e-7}, &why))
        << why;
  }
  outputs.clear();
  context.allocator().release_pool(pool);
}

}  // namespace
}  // namespace grove
