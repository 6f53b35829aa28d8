// Training through a dropout that draws from the implicit generator (no seed
// operands): the backward uses the forward's mask and draws nothing (Note
// [Implicit generator], compiler/ir/generator_state.h; Note [Saved
// activations], compiler/autodiff/training_programs.h).
//
// The oracle shares no code with grove's autodiff: with the mask fixed,
// loss = mean(dropout(x·w)²) is homogeneous of degree 2 in w, so Euler's
// identity Σ grad_i·w_i = 2·loss holds exactly (up to rounding) whatever the
// mask, and fails when the backward masks with other numbers than the forward.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/ir/builder.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/philox_generator.h"
#include "tests/common/test_util.h"
#include "training/trainer.h"

namespace grove::training {
namespace {

using compiler::ir::DType;
using compiler::ir::ValueId;
using runtime::Tensor;

constexpr int64_t kElements = 64;  // x·w is 8 x 8

// loss = mean(dropout(x·w, p)²), one dropout of kElements elements.
compiler::ir::Program dropout_model(runtime::Device device, ValueId* loss) {
  compiler::ir::ProgramBuilder b("dropout_model", device);
  ValueId x = b.input("x", {8, 8});
  ValueId w = b.param("w", {8, 8}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  ValueId dropped = b.dropout(b.matmul(x, w), 0.5, "drop");
  *loss = b.mean(b.mul(dropped, dropped), {}, false, "loss");
  b.output(*loss);
  return b.build();
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> left = a.to_doubles(), right = b.to_doubles();
  double sum = 0;
  for (size_t i = 0; i < left.size(); ++i) sum += left[i] * right[i];
  return sum;
}

class DropoutTraining : public testing::DeviceTest {};

TEST_P(DropoutTraining, GradientsSatisfyEulersIdentityAndEachStepDrawsOnce) {
  cudagraph_trees::backend::register_cudagraphs_backend();
  for (const std::string backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    cudagraph_trees::reset_tree_managers();
    ValueId loss;
    compiler::ir::Program model = dropout_model(device(), &loss);
    Trainer trainer(model, loss, {.backend = backend});
    EXPECT_EQ(trainer.forward_stage().generator_draws(), kElements);
    EXPECT_EQ(trainer.backward_stage().generator_draws(), 0) << "the backward draws nothing";
    GROVE_SEEDED_RNG(rng);
    Tensor x = testing::random_tensor(rng, {8, 8}, device());
    runtime::PhiloxGenerator& generator = runtime::default_generator(device());
    generator.manual_seed(1234);
    for (int step = 0; step < 4; ++step) {  // warm-up, recording, replays
      uint64_t before = generator.offset();
      double value = trainer.forward_backward({x}).to_doubles().at(0);
      EXPECT_EQ(generator.offset() - before, static_cast<uint64_t>(kElements)) << "step " << step;
      double euler = dot(trainer.state("grad.w"), trainer.state("w"));
      EXPECT_NEAR(euler, 2 * value, 1e-4 * std::abs(2 * value))
          << "step " << step << ": sum(grad * w) against 2 loss";
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(DropoutTraining);

}  // namespace
}  // namespace grove::training
