// Every kernel of both benchmark models and of their training programs,
// scheduled for cuda, emits PTX that ptxas accepts for sm_90 (when ptxas is
// installed; CI has it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "compiler/autodiff/training_programs.h"
#include "compiler/codegen/codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/scheduler.h"
#include "compiler/model_format/model_json.h"
#include "tests/training/benchmark_models.h"
#include "training/optimizer.h"

namespace grove {
namespace {

std::string find_ptxas() {
  for (const char* candidate : {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"}) {
    if (std::ifstream(candidate).good()) return candidate;
  }
  return "";
}

// The programs to check: both models' inference programs, and the forward,
// backward and SGD step of their training (multi-part kernels included).
std::vector<std::pair<std::string, compiler::ir::Program>> cuda_programs() {
  std::vector<std::pair<std::string, compiler::ir::Program>> programs;
  for (const char* name : {"mlp16x512", "gpt4x256"}) {
    programs.emplace_back(
        name, compiler::model_format::load_model_file(
                  std::string("benchmarks/models/") + name + ".json", {}, runtime::kCudaDevice));
  }
  using training::testing::ModelWithLoss;
  for (ModelWithLoss model :
       {training::testing::mlp_with_mse(4, runtime::kCudaDevice),
        training::testing::gpt_with_next_token_loss(2, 8, runtime::kCudaDevice)}) {
    compiler::autodiff::TrainingPrograms training =
        compiler::autodiff::build_training_programs(model.program, model.loss);
    training::OptimizerProgram step = training::build_optimizer_program(
        training.forward, training.params, training::OptimizerKind::kSgdMomentum);
    const std::string name = model.program.name();
    programs.emplace_back(name + " forward", std::move(training.forward));
    programs.emplace_back(name + " backward", std::move(training.backward));
    programs.emplace_back(name + " sgd", std::move(step.program));
  }
  return programs;
}

TEST(ModelPtx, EveryKernelOfBothModelsAndTheirTrainingAssemblesForSm90) {
  const std::string ptxas = find_ptxas();
  const std::string dir = ::testing::TempDir();
  std::set<std::string> seen;
  size_t kernels = 0, multi_part = 0;
  for (const auto& [name, program] : cuda_programs()) {
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    options.mode = name.find(' ') == std::string::npos ? compiler::ops::ExecMode::kInference
                                                       : compiler::ops::ExecMode::kTraining;
    compiler::lowering::ScheduledProgram scheduled =
        compiler::lowering::schedule_program(program, options);
    for (const compiler::lowering::Step& step : scheduled.steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel) continue;
      ++kernels;
      const std::string signature = step.kernel.spec.signature();
      if (!seen.insert(signature).second) continue;
      if (!step.kernel.spec.part_sizes.empty()) ++multi_part;
      std::string ptx = compiler::codegen::emit_ptx(step.kernel.spec);
      ASSERT_NE(ptx.find(".entry"), std::string::npos) << step.kernel.spec.name;
      if (ptxas.empty()) continue;
      std::string path = dir + "/kernel.ptx";
      std::ofstream(path) << ptx;
      std::string command = ptxas + " -arch=sm_90 -o " + dir + "/kernel.cubin " + path + " 2>&1";
      EXPECT_EQ(std::system(command.c_str()), 0)
          << name << ": ptxas rejected kernel " << step.kernel.spec.name << "\n"
          << ptx;
    }
  }
  EXPECT_GT(kernels, 0u);
  EXPECT_GT(multi_part, 0u) << "expected the SGD steps to use multi-part kernels";
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not installed; PTX emitted but not assembled";
}

// Note [Rows held in registers]: a residual add and layer norm over rows of
// 192 features (ViT-tiny's), scheduled for cuda, is one kernel that loads
// each input element once (GROVE_ROWS_IN_REGISTERS=0: once per pass, the
// mean's, the variance's and the outputs'), and ptxas accepts both forms.
// Note [One barrier per block reduction]: each form waits at two barriers per
// reduction, one with GROVE_ONE_BARRIER_REDUCE=1.
TEST(ModelPtx, ShortRowsAreLoadedOnceForEveryPass) {
  compiler::ir::ProgramBuilder b("add_layer_norm", runtime::kCudaDevice);
  const compiler::ir::ValueId x = b.input("x", {272, 192});
  const compiler::ir::ValueId residual = b.input("residual", {272, 192});
  b.output(b.layer_norm(b.add(x, residual), b.input("w", {192}), b.input("b", {192})));
  const compiler::ir::Program program = b.build();
  const std::string ptxas = find_ptxas();
  const std::string dir = ::testing::TempDir();
  size_t barriers = 0;
  auto global_loads = [&]() {
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    compiler::lowering::ScheduledProgram scheduled =
        compiler::lowering::schedule_program(program, options);
    size_t kernels = 0, loads = 0;
    for (const compiler::lowering::Step& step : scheduled.steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel) continue;
      ++kernels;
      const std::string ptx = compiler::codegen::emit_ptx(step.kernel.spec);
      for (size_t at = ptx.find("ld.global"); at != std::string::npos;
           at = ptx.find("ld.global", at + 1)) {
        ++loads;
      }
      barriers = 0;
      for (size_t at = ptx.find("bar.sync"); at != std::string::npos;
           at = ptx.find("bar.sync", at + 1)) {
        ++barriers;
      }
      if (ptxas.empty()) continue;
      std::ofstream(dir + "/rows.ptx") << ptx;
      const std::string command =
          ptxas + " -arch=sm_90 -o " + dir + "/rows.cubin " + dir + "/rows.ptx 2>&1";
      EXPECT_EQ(std::system(command.c_str()), 0) << ptx;
    }
    EXPECT_EQ(kernels, 1u);
    return loads;
  };
  const size_t held = global_loads();
  EXPECT_EQ(barriers, 4u);
  ::setenv("GROVE_ONE_BARRIER_REDUCE", "1", 1);
  EXPECT_EQ(global_loads(), held);
  EXPECT_EQ(barriers, 2u);
  ::setenv("GROVE_ROWS_IN_REGISTERS", "0", 1);
  const size_t plain = global_loads();
  EXPECT_EQ(barriers, 2u);
  ::unsetenv("GROVE_ROWS_IN_REGISTERS");
  ::unsetenv("GROVE_ONE_BARRIER_REDUCE");
  // x, residual, weight and bias once each; the plain form reads x and the
  // residual in each of its three passes.
  EXPECT_EQ(held, 4u);
  EXPECT_EQ(plain, 8u);
}

// Note [Multi-part kernel pointers as integers]: the optimizer step's
// multi-part kernels (gpt4x256's SGD step has 69 parts, 3 pointers each) keep
// few registers and spill nothing; with pointer parameters the gpt kernel took
// 255 registers and spilled 1,312 bytes.
TEST(ModelPtx, MultiPartKernelsKeepTheirPointersOutOfRegisters) {
  const std::string ptxas = find_ptxas();
  ASSERT_FALSE(ptxas.empty()) << "ptxas not found (tools/setup.sh checks for the CUDA Toolkit)";
  const std::string dir = ::testing::TempDir();
  size_t checked = 0;
  for (const auto& [name, program] : cuda_programs()) {
    if (name.find(" sgd") == std::string::npos) continue;
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    options.mode = compiler::ops::ExecMode::kTraining;
    for (const compiler::lowering::Step& step :
         compiler::lowering::schedule_program(program, options).steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel ||
          step.kernel.spec.part_sizes.size() < 8) {
        continue;
      }
      std::ofstream(dir + "/parts.ptx") << compiler::codegen::emit_ptx(step.kernel.spec);
      const std::string report = dir + "/parts.txt";
      const std::string command = ptxas + " -v -arch=sm_90 -o " + dir + "/parts.cubin " + dir +
                                  "/parts.ptx >" + report + " 2>&1";
      ASSERT_EQ(std::system(command.c_str()), 0) << name;
      std::stringstream text;
      text << std::ifstream(report).rdbuf();
      std::smatch registers;
      const std::string out = text.str();
      ASSERT_TRUE(std::regex_search(out, registers, std::regex("Used ([0-9]+) registers"))) << out;
      EXPECT_LE(std::stoi(registers[1]), 64)
          << name << ": " << step.kernel.spec.part_sizes.size() << " parts\n"
          << out;
      EXPECT_NE(out.find("0 bytes spill stores"), std::string::npos) << name << "\n" << out;
      ++checked;
    }
  }
  EXPECT_GE(checked, 2u) << "expected a multi-part SGD kernel of 8 parts or more for each model";
}

}  // namespace
}  // namespace grove
