// Caller-owned memory viewed as grove tensors: no copy, the release callback
// runs once when the last view goes, and bad descriptions are rejected.
#include "runtime/external_storage.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/error.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

TEST(ExternalStorage, ViewsCallerMemoryWithoutCopyingAndReleasesOnceAfterTheLastView) {
  std::mt19937 rng(7);
  std::vector<float> values = ::grove::testing::random_floats(rng, 12);
  int releases = 0;
  {
    Tensor tensor = external_tensor(values.data(), {3, 4}, {}, DType::kF32, kSimDevice,
                                    [&releases] { ++releases; });
    EXPECT_EQ(tensor.data_ptr(), values.data());
    EXPECT_EQ(tensor.storage()->nbytes(), 12 * sizeof(float));
    Tensor view = tensor.transpose(0, 1);
    EXPECT_EQ(view.to_vector<float>()[1], values[4]);
    values[4] = 42.0f;  // the caller's write is what grove reads: nothing was copied
    EXPECT_EQ(view.to_vector<float>()[1], 42.0f);
    tensor = Tensor();
    EXPECT_EQ(releases, 0) << "a view still holds the storage";
  }
  EXPECT_EQ(releases, 1);
}

TEST(ExternalStorage, StridedViewSpansOnlyTheElementsItReaches) {
  std::vector<float> values(20, 1.0f);
  // Every other column of a [4, 5] row-major array: shape [4, 3], strides [5, 2].
  Tensor tensor = external_tensor(values.data(), {4, 3}, {5, 2}, DType::kF32, kSimDevice, {});
  EXPECT_EQ(tensor.storage()->nbytes(), (3 * 5 + 2 * 2 + 1) * sizeof(float));
  EXPECT_FALSE(tensor.is_contiguous());
}

TEST(ExternalStorage, PoisoningReleasesTheCallersReference) {
  std::vector<float> values(4, 2.0f);
  int releases = 0;
  Tensor tensor =
      external_tensor(values.data(), {4}, {}, DType::kF32, kSimDevice, [&releases] { ++releases; });
  tensor.storage()->poison("gone");
  EXPECT_EQ(releases, 1);
  EXPECT_THROW(tensor.data_ptr(), StaleTensorError);
}

TEST(ExternalStorage, BadDescriptionsAreRejectedAndStillReleased) {
  std::vector<float> values(4, 0.5f);
  int releases = 0;
  auto count = [&releases] { ++releases; };
  EXPECT_THROW(external_tensor(values.data(), {2, 2}, {1}, DType::kF32, kSimDevice, count),
               ShapeError);
  EXPECT_THROW(external_tensor(values.data(), {2, -2}, {}, DType::kF32, kSimDevice, count),
               ShapeError);
  EXPECT_THROW(external_tensor(values.data(), {2, 2}, {-2, 1}, DType::kF32, kSimDevice, count),
               ShapeError);
  EXPECT_THROW(external_tensor(nullptr, {2, 2}, {}, DType::kF32, kSimDevice, count), Error);
  EXPECT_EQ(releases, 4) << "every rejected description releases the caller's reference";
  EXPECT_NO_THROW(external_tensor(nullptr, {0, 3}, {}, DType::kF32, kSimDevice, count));
}

}  // namespace
}  // namespace grove::runtime
