// The strided copy kernel on every device: expanded (stride 0), transposed,
// sliced and high-rank layouts of every element size gathered into
// contiguous memory, element for element, also when captured into a graph
// and replayed over new source values.
#include <gtest/gtest.h>

#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "runtime/strided_copy_kernel.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::random_floats;
using ::grove::testing::random_ints;

// Row-major host reference of `view` (to_vector honours strides; the copy
// must agree with it bit for bit).
template <typename T>
void expect_same_elements(const Tensor& view) {
  Tensor copy = contiguous_copy(view);
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_EQ(copy.shape(), view.shape());
  EXPECT_EQ(copy.to_vector<T>(), view.to_vector<T>()) << view.str();
}

class StridedCopyTest : public ::grove::testing::DeviceTest {};

TEST_P(StridedCopyTest, ExpandedTransposedAndSlicedF32ViewsCopyElementForElement) {
  GROVE_SEEDED_RNG(rng);
  Tensor row = Tensor::from_vector(random_floats(rng, 5), {1, 5}, device());
  expect_same_elements<float>(row.expand({4, 5}));  // stride 0 rows
  Tensor column = Tensor::from_vector(random_floats(rng, 3), {3, 1}, device());
  expect_same_elements<float>(column.expand({3, 7}));  // stride 0 columns
  Tensor matrix = Tensor::from_vector(random_floats(rng, 6 * 9), {6, 9}, device());
  expect_same_elements<float>(matrix.transpose(0, 1));
  expect_same_elements<float>(matrix.slice(1, 2, 7));
  expect_same_elements<float>(matrix.slice(0, 1, 5).transpose(0, 1).unsqueeze(0).expand({2, 9, 4}));
}

TEST_P(StridedCopyTest, EveryElementSizeAndRankEightCopy) {
  GROVE_SEEDED_RNG(rng);
  Tensor ints = Tensor::from_vector(random_ints(rng, 24, -1000, 1000), {2, 3, 4}, device());
  expect_same_elements<int64_t>(ints.permute({2, 0, 1}));
  Tensor eight = Tensor::from_vector(random_floats(rng, 256), {2, 2, 2, 2, 2, 2, 2, 2}, device());
  expect_same_elements<float>(eight.permute({7, 6, 5, 4, 3, 2, 1, 0}));
  Tensor halves = Tensor::empty({4, 6}, DType::kBF16, device());
  std::vector<uint16_t> bits(24);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(0x3f80 + i);
  halves.copy_from_host(bits.data());
  Tensor copy = contiguous_copy(halves.transpose(0, 1));
  std::vector<uint8_t> got = copy.to_host_bytes();
  std::vector<uint8_t> expected = halves.transpose(0, 1).to_host_bytes();
  EXPECT_EQ(got, expected);
}

TEST_P(StridedCopyTest, RejectsAMismatchedDestinationAndRanksAboveEight) {
  Tensor source = Tensor::empty({4, 4}, DType::kF32, device());
  Tensor wrong = Tensor::empty({16}, DType::kF32, device());
  EXPECT_THROW(copy_to_contiguous(source, wrong), ShapeError);
  Tensor nine = Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 2}, DType::kF32, device());
  try {
    contiguous_copy(nine);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("at most 8"), std::string::npos) << error.what();
  }
}

TEST_P(StridedCopyTest, CapturedCopyReadsTheSourceAtEveryReplay) {
  GROVE_SEEDED_RNG(rng);
  DeviceContext& context = device_context(device());
  StreamHandle stream = context.create_stream();
  PoolId pool = context.allocator().create_pool();
  {
    StreamGuard guard(device(), stream);
    Tensor base = Tensor::from_vector(random_floats(rng, 8), {8, 1}, device());
    Tensor view = base.expand({8, 3}).transpose(0, 1);
    GraphRecording recording(device());
    recording.capture_begin(stream, pool);
    Tensor copy = contiguous_copy(view);
    recording.capture_end();
    recording.instantiate();
    for (int replay = 0; replay < 2; ++replay) {
      std::vector<float> values = random_floats(rng, 8);
      base.copy_from_host(values.data());
      recording.replay(stream);
      EXPECT_EQ(copy.to_vector<float>(), view.to_vector<float>()) << "replay " << replay;
    }
  }
  context.allocator().release_pool(pool);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(StridedCopyTest);

}  // namespace
}  // namespace grove::runtime
