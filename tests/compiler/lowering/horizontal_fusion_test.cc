// Horizontal fusion (compiler/lowering/horizontal_fusion.h) of an optimizer
// step: the updates of many params of odd sizes become one multi-part kernel
// (Note [Multi-part kernels], Note [Multi-part kernel arguments] in
// compiler/codegen/kernel_spec.h) whose results equal one kernel per param
// bitwise (GROVE_HORIZONTAL_FUSION=0), for SGD with momentum and weight decay
// and for AdamW, in f32, bf16 and f16; "eager" equals "cudagraphs" bitwise
// with it; the launch count is asserted on the lowered function's kernel
// report; the kernel fits cuda's parameter space (ptxas) up to the run limit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "compiler/codegen/codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "compiler/lowering/scheduler.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::uniform_init;
using compiler::ir::ValueId;
using runtime::DType;

enum class Update { kSgd, kAdamW };

// Odd sizes around the tile (kMultiPartTile = 1024) and block boundaries, and
// a 2-D param; cycled over the params.
const std::vector<runtime::Shape> kShapes = {{1},    {3}, {1000},  {4099}, {1023},  {1024},
                                             {1025}, {2}, {7, 13}, {257},  {70001}, {33}};

// One update node per param, as build_optimizer_program and grove.optim make
// them: gradients are per-call inputs after the hyper-parameters, the params
// and their state random (exp_avg_sq non-negative).
compiler::ir::Program update_program(runtime::Device device, Update update, size_t params,
                                     DType dtype) {
  ProgramBuilder b(update == Update::kSgd ? "sgd_step" : "adamw_step", device);
  std::vector<ValueId> hyper;
  const std::vector<const char*> names =
      update == Update::kSgd
          ? std::vector<const char*>{"lr", "momentum", "weight_decay"}
          : std::vector<const char*>{"lr", "beta1", "beta2", "eps", "weight_decay", "step"};
  for (const char* name : names) {
    hyper.push_back(b.input(name, {}));
  }
  for (size_t i = 0; i < params; ++i) {
    const runtime::Shape& shape = kShapes[i % kShapes.size()];
    const std::string id = std::to_string(i);
    ValueId param = b.param("p" + id, shape, dtype, uniform_init(-1, 1, 100 + i));
    ValueId grad = b.input("g" + id, shape, dtype);
    if (update == Update::kSgd) {
      ValueId momentum = b.buffer("m" + id, shape, dtype, uniform_init(-1, 1, 200 + i));
      b.sgd_momentum_update(param, grad, momentum, hyper[0], hyper[1], hyper[2], "u" + id);
    } else {
      ValueId exp_avg = b.buffer("m" + id, shape, dtype, uniform_init(-1, 1, 200 + i));
      ValueId exp_avg_sq = b.buffer("v" + id, shape, dtype, uniform_init(0, 1, 300 + i));
      b.adamw_update(param, grad, exp_avg, exp_avg_sq, hyper[0], hyper[1], hyper[2], hyper[3],
                     hyper[4], hyper[5], "u" + id);
    }
  }
  return b.build();
}

// The hyper-parameters of step `step` (1-based), then a random gradient per param.
compiler::TensorList step_inputs(const compiler::ir::Program& program, Update update, int step,
                                 std::mt19937& rng) {
  compiler::TensorList inputs;
  const std::vector<double> hyper = update == Update::kSgd
                                        ? std::vector<double>{0.05, 0.9, 0.01}
                                        : std::vector<double>{1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0};
  for (size_t h = 0; h < hyper.size(); ++h) {
    const double value = h + 1 == hyper.size() && update == Update::kAdamW ? step : hyper[h];
    inputs.push_back(runtime::Tensor::scalar(value, DType::kF32, program.device()));
  }
  for (ValueId id : program.inputs()) {
    const compiler::ir::Value& value = program.value(id);
    if (value.kind != compiler::ir::ValueKind::kInput || value.type.shape.empty()) {
      continue;
    }
    const int64_t count = runtime::shape_numel(value.type.shape);
    std::vector<float> data = testing::random_floats(rng, static_cast<size_t>(count), -2, 2);
    testing::HostTensor host{value.type.shape, value.type.dtype,
                             std::vector<double>(data.begin(), data.end())};
    inputs.push_back(testing::to_device(host, program.device()));
  }
  return inputs;
}

size_t kernels_named(const compiler::lowering::KernelReport& report, const std::string& name) {
  size_t count = 0;
  for (const std::string& kernel : report.kernels) {
    count += kernel == name ? 1 : 0;
  }
  return count;
}

// Every param and state buffer of `a` equals `b`'s bit for bit.
void expect_same_state(const CompiledModel& a, const CompiledModel& b, const std::string& label) {
  for (const std::string& name : a.state_names()) {
    std::vector<uint8_t> expected = b.state(name).to_host_bytes();
    std::vector<uint8_t> got = a.state(name).to_host_bytes();
    ASSERT_EQ(got.size(), expected.size()) << label << ": " << name;
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0)
        << label << ": " << name << " differs";
  }
}

class HorizontalFusionOnDevice : public testing::DeviceTest {
 protected:
  void SetUp() override {
    testing::DeviceTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    cudagraph_trees::backend::register_cudagraphs_backend();
    cudagraph_trees::reset_tree_managers();
  }
  void TearDown() override { cudagraph_trees::reset_tree_managers(); }

  // Runs three steps of the fused and the unfused program from the same state
  // on the same gradients and compares every param and state buffer bitwise.
  void expect_fused_equals_unfused(Update update, size_t params, DType dtype,
                                   size_t expected_kernels) {
    const std::string label = str_cat(update == Update::kSgd ? "sgd" : "adamw", " ", params,
                                      " params ", runtime::dtype_name(dtype));
    SCOPED_TRACE(label);
    compiler::ir::Program program = update_program(device(), update, params, dtype);
    const compiler::backends::CompileOptions options{
        .backend = "eager", .stage = compiler::backends::Stage::kOptimizer};
    CompiledModel fused = compiler::backends::compile(program, options);
    CompiledModel unfused = [&] {
      testing::ScopedEnv env("GROVE_HORIZONTAL_FUSION", "0");
      return compiler::backends::compile(program, options);
    }();
    const std::string kernel =
        update == Update::kSgd ? "multi_sgd_momentum_update" : "multi_adamw_update";
    compiler::lowering::KernelReport report = fused.kernel_report();
    EXPECT_EQ(report.kernels.size(), expected_kernels) << report.str();
    EXPECT_EQ(kernels_named(report, kernel), expected_kernels) << report.str();
    EXPECT_EQ(unfused.kernel_report().kernels.size(), params) << unfused.kernel_report().str();
    expect_same_state(fused, unfused, "initial state");
    GROVE_SEEDED_RNG(rng);
    for (int step = 1; step <= 3; ++step) {
      compiler::TensorList inputs = step_inputs(program, update, step, rng);
      fused(inputs);
      unfused(inputs);
      expect_same_state(fused, unfused, str_cat("after step ", step));
    }
  }
};

// Note [Multi-part kernels]: the update of every param is one launch, bitwise
// equal to one kernel per param.
TEST_P(HorizontalFusionOnDevice, SgdOfOddSizedParamsIsOneKernelEqualToOnePerParam) {
  expect_fused_equals_unfused(Update::kSgd, 40, DType::kF32, 1);
}

TEST_P(HorizontalFusionOnDevice, AdamWOfOddSizedParamsIsOneKernelEqualToOnePerParam) {
  expect_fused_equals_unfused(Update::kAdamW, 40, DType::kF32, 1);
}

TEST_P(HorizontalFusionOnDevice, HalfPrecisionUpdatesAreOneKernelEqualToOnePerParam) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    expect_fused_equals_unfused(Update::kSgd, 13, dtype, 1);
    expect_fused_equals_unfused(Update::kAdamW, 13, dtype, 1);
  }
}

// Note [Multi-part kernel arguments]: shared hyper-parameters and in-place
// outputs leave 3 (SGD) or 4 (AdamW) pointers per param, so 150 SGD or 120
// AdamW updates fit 4000 bytes; past that the run splits, results unchanged.
TEST_P(HorizontalFusionOnDevice, ManyParamsFitOneLaunchUntilTheParameterSpaceIsFull) {
  expect_fused_equals_unfused(Update::kSgd, 150, DType::kF32, 1);
  expect_fused_equals_unfused(Update::kAdamW, 120, DType::kF32, 1);
  expect_fused_equals_unfused(Update::kSgd, 200, DType::kF32, 2);
}

TEST_P(HorizontalFusionOnDevice, EagerAndCudagraphsAgreeBitwise) {
  for (Update update : {Update::kSgd, Update::kAdamW}) {
    SCOPED_TRACE(update == Update::kSgd ? "sgd" : "adamw");
    compiler::ir::Program program = update_program(device(), update, 30, DType::kF32);
    CompiledModel eager = compiler::backends::compile(
        program, {.backend = "eager", .stage = compiler::backends::Stage::kOptimizer});
    CompiledModel graphs = compiler::backends::compile(
        program, {.backend = "cudagraphs", .stage = compiler::backends::Stage::kOptimizer});
    ASSERT_EQ(graphs.kernel_report().kernels.size(), 1u) << graphs.kernel_report().str();
    GROVE_SEEDED_RNG(rng);
    for (int step = 1; step <= 4; ++step) {
      compiler::TensorList inputs = step_inputs(program, update, step, rng);
      graphs.mark_step_begin();
      eager(inputs);
      graphs(inputs);
      expect_same_state(graphs, eager, str_cat("after step ", step));
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(HorizontalFusionOnDevice);

TEST(HorizontalFusion, SwitchRejectsValuesOtherThanZeroAndOne) {
  testing::ScopedEnv env("GROVE_HORIZONTAL_FUSION", "off");
  testing::expect_error<ConfigError>(
      [] {
        compiler::backends::compile(
            update_program(runtime::kSimDevice, Update::kSgd, 2, DType::kF32));
      },
      {"GROVE_HORIZONTAL_FUSION='off'", "expected 1", "or 0"});
}

std::string find_ptxas() {
  for (const char* candidate : {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"}) {
    if (std::ifstream(candidate).good()) {
      return candidate;
    }
  }
  return "";
}

// The largest runs the fusion makes (150 SGD, 120 AdamW updates; bf16 too)
// assemble for sm_90: their parameters fit cuda's 4 KiB.
TEST(HorizontalFusion, LargestRunsAssembleForSm90) {
  const std::string ptxas = find_ptxas();
  const std::string dir = ::testing::TempDir();
  struct Case {
    Update update;
    size_t params;
    DType dtype;
  };
  for (Case c : {Case{Update::kSgd, 150, DType::kF32}, Case{Update::kAdamW, 120, DType::kF32},
                 Case{Update::kAdamW, 40, DType::kBF16}}) {
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    options.mode = compiler::ops::ExecMode::kTraining;
    compiler::lowering::ScheduledProgram scheduled = compiler::lowering::schedule_program(
        update_program(runtime::kCudaDevice, c.update, c.params, c.dtype), options);
    size_t kernels = 0;
    for (const compiler::lowering::Step& step : scheduled.steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel) {
        continue;
      }
      ++kernels;
      const compiler::codegen::KernelSpec& spec = step.kernel.spec;
      ASSERT_EQ(spec.part_count(), c.params) << spec.name;
      EXPECT_LE(8 * (spec.input_argument_count() + spec.output_argument_count()), 4000u);
      const std::string ptx = compiler::codegen::emit_ptx(spec);
      if (ptxas.empty()) {
        continue;
      }
      const std::string path = dir + "/multi_part.ptx";
      std::ofstream(path) << ptx;
      const std::string command =
          ptxas + " -arch=sm_90 -o " + dir + "/multi_part.cubin " + path + " 2>&1";
      EXPECT_EQ(std::system(command.c_str()), 0) << "ptxas rejected " << spec.name;
    }
    EXPECT_EQ(kernels, 1u);
  }
  if (ptxas.empty()) {
    GTEST_SKIP() << "ptxas not installed; PTX emitted but not assembled";
  }
}

}  // namespace
}  // namespace grove
