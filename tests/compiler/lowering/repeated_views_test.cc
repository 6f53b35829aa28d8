// Note [Repeated views computed once] (compiler/lowering/lowering_graph.cc):
// two GEMMs reading the same transposed-then-flattened input, as
// nn.TransformerDecoder's layers read `memory`, copy it once, and the results
// still match the float64 reference on every device.
#include <gtest/gtest.h>

#include <string>

#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;

// x [2, 6, 8] seq-first twice: linear(reshape(transpose(x, 0, 1), [12, 8]), w_i).
compiler::ir::Program two_layers_reading_one_view(runtime::Device device, bool output_a_view) {
  ProgramBuilder b("repeated_views", device);
  ValueId x = b.input("x", {2, 6, 8}, DType::kF32);
  for (int layer = 0; layer < 2; ++layer) {
    ValueId w = b.input(str_cat("w", layer), {5, 8}, DType::kF32);
    ValueId rows = b.reshape(b.transpose(x, 0, 1), {12, 8});
    b.output(b.linear(rows, w, compiler::ir::kNoValue, str_cat("fc", layer)));
    if (output_a_view && layer == 1) b.output(rows);
  }
  return b.build();
}

size_t copies_in(const std::string& text) {
  size_t count = 0;
  for (size_t at = text.find("kernel copy"); at != std::string::npos;
       at = text.find("kernel copy", at + 1)) {
    ++count;
  }
  return count;
}

TEST(ViewLowering, RepeatedViewIsCopiedOnce) {
  compiler::lowering::LoweredProgram lowered =
      compiler::lowering::lower(two_layers_reading_one_view(runtime::kSimDevice, false));
  EXPECT_EQ(copies_in(lowered.describe()), 1u) << lowered.describe();
  EXPECT_EQ(lowered.kernel_report().library_gemms, 2u) << lowered.describe();
  // A view that is a program output keeps its own node (and copy).
  lowered = compiler::lowering::lower(two_layers_reading_one_view(runtime::kSimDevice, true));
  EXPECT_EQ(copies_in(lowered.describe()), 2u) << lowered.describe();
}

class ViewLoweringOnDevice : public testing::DeviceTest {};

TEST_P(ViewLoweringOnDevice, RepeatedViewsMatchTheReference) {
  for (bool output_a_view : {false, true}) {
    compiler::ir::Program program = two_layers_reading_one_view(device(), output_a_view);
    testing::HostTensorList inputs = testing::random_inputs(program, 21);
    testing::expect_matches_reference(program, inputs, device(),
                                      testing::tolerance_for(DType::kF32), "repeated_views");
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(ViewLoweringOnDevice);

}  // namespace
}  // namespace grove
