// Hostile but valid input (issue 24): models whose size is the attack. A long
// chain of pointwise ops must compile and run on both backends with the right
// result instead of overflowing the stack in the compiler.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"

namespace grove::reliability {
namespace {

using compiler::TensorList;
using compiler::backends::compile;
using compiler::backends::CompiledModel;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::Tensor;

class LongChains : public testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    cudagraph_trees::backend::register_cudagraphs_backend();
    cudagraph_trees::reset_tree_managers();
  }
  void TearDown() override { cudagraph_trees::reset_tree_managers(); }
};

// Note [Fused expression depth] (compiler/lowering/fusion.cc): 25,000 rounds of
// y = gelu(y) + 1 (50,001 nodes with the shared constant) used to overflow the
// stack while assembling the one fused kernel; a chain of 15,000 gelus already
// did. Inputs in [6, 8) on an eighth grid make gelu the identity in f32, so the
// result is exactly x + 25000: a node lost or applied twice shows.
TEST_P(LongChains, FiftyThousandNodeChainsCompileAndRunOnBothBackends) {
  GROVE_SEEDED_RNG(rng);
  constexpr int kRounds = 25000;
  ProgramBuilder b("long_chain", device());
  ValueId y = b.input("x", {64});
  ValueId one = b.full(1.0);
  for (int round = 0; round < kRounds; ++round) y = b.add(b.gelu(y), one);
  b.output(y);
  compiler::ir::Program program = b.build();
  ASSERT_GE(program.nodes().size(), 2u * kRounds);
  std::uniform_int_distribution<int> eighths(48, 63);
  std::vector<float> x(64);
  for (float& value : x) value = static_cast<float>(eighths(rng)) / 8.0f;
  for (const std::string backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    CompiledModel model = compile(program, {.backend = backend});
    // One kernel per 256 nodes of the chain, not one kernel per node.
    size_t kernels = model.kernel_report().kernels.size();
    EXPECT_GE(kernels, 2u * kRounds / 256);
    EXPECT_LE(kernels, 2u * kRounds / 256 + 2);
    for (int call = 0; call < 3; ++call) {  // warm-up, recording, replay
      Tensor input = Tensor::from_vector(x, {64}, device());
      std::vector<float> got = model({input})[0].to_vector<float>();
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(got[i], x[i] + static_cast<float>(kRounds))
            << "call " << call << " element " << i;
      }
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(LongChains);

}  // namespace
}  // namespace grove::reliability
