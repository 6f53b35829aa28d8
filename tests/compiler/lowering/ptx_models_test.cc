// Every kernel of both benchmark models, scheduled for cuda, emits PTX that
// ptxas accepts for sm_90 (when ptxas is installed; CI has it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "compiler/codegen/codegen.h"
#include "compiler/lowering/scheduler.h"
#include "compiler/model_format/model_json.h"

namespace grove {
namespace {

std::string find_ptxas() {
  for (const char* candidate : {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"}) {
    if (std::ifstream(candidate).good()) return candidate;
  }
  return "";
}

TEST(ModelPtx, EveryKernelOfBothModelsAssemblesForSm90) {
  const std::string ptxas = find_ptxas();
  const std::string dir = ::testing::TempDir();
  std::set<std::string> seen;
  for (const char* name : {"mlp16x512", "gpt4x256"}) {
    compiler::ir::Program program = compiler::model_format::load_model_file(
        std::string("benchmarks/models/") + name + ".json", {}, runtime::kCudaDevice);
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    compiler::lowering::ScheduledProgram scheduled =
        compiler::lowering::schedule_program(program, options);
    size_t kernels = 0;
    for (const compiler::lowering::Step& step : scheduled.steps) {
      if (step.kind != compiler::lowering::StepKind::kKernel) continue;
      ++kernels;
      const std::string signature = step.kernel.spec.signature();
      if (!seen.insert(signature).second) continue;
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
    EXPECT_GT(kernels, 0u);
  }
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not installed; PTX emitted but not assembled";
}

}  // namespace
}  // namespace grove
