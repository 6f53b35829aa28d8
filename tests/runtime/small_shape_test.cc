// SmallShape behaves like the std::vector<int64_t> it replaced (checked
// against one over random operation sequences), and copying a Tensor of rank
// <= kInlineCapacity allocates nothing (Note [Shapes without allocation]).
#include "runtime/small_shape.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/tensor.h"
#include "tests/common/test_util.h"
#include "tests/runtime/allocation_counter.h"

namespace grove::runtime {
namespace {

void expect_same(const SmallShape& shape, const std::vector<int64_t>& reference) {
  ASSERT_EQ(shape.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) EXPECT_EQ(shape[i], reference[i]) << "at " << i;
  EXPECT_EQ(shape, SmallShape(reference));
  EXPECT_EQ(shape.vec(), reference);
  EXPECT_EQ(shape.is_inline(), shape.capacity() == SmallShape::kInlineCapacity);
}

TEST(SmallShape, RandomOperationSequencesMatchStdVector) {
  std::mt19937_64 rng(grove::testing::test_seed());
  std::uniform_int_distribution<int64_t> value(-50, 50);
  for (int round = 0; round < 200; ++round) {
    SmallShape shape;
    std::vector<int64_t> reference;
    for (int step = 0; step < 24; ++step) {
      int64_t v = value(rng);
      size_t position = reference.empty() ? 0 : static_cast<size_t>(rng() % (reference.size() + 1));
      switch (rng() % 7) {
        case 0:
        case 1:
          shape.push_back(v);
          reference.push_back(v);
          break;
        case 2:
          shape.insert(shape.begin() + position, v);
          reference.insert(reference.begin() + position, v);
          break;
        case 3:
          if (!reference.empty()) {
            size_t at = position % reference.size();
            shape.erase(shape.begin() + at);
            reference.erase(reference.begin() + at);
          }
          break;
        case 4: {
          size_t size = static_cast<size_t>(rng() % 10);
          shape.resize(size, v);
          reference.resize(size, v);
          break;
        }
        case 5: {
          SmallShape copy = shape;  // copy, then move back
          shape = std::move(copy);
          break;
        }
        case 6:
          if (!reference.empty()) {
            shape.pop_back();
            reference.pop_back();
          }
          break;
      }
      expect_same(shape, reference);
    }
  }
}

TEST(SmallShape, ConstructsComparesAndConvertsLikeAVector) {
  SmallShape a = {2, 3, 4};
  SmallShape b(std::vector<int64_t>{2, 3, 4});
  SmallShape c(3, 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_LT(a, c);
  EXPECT_EQ(c, (SmallShape{7, 7, 7}));
  std::vector<int64_t> converted = a;
  EXPECT_EQ(converted, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(a.rbegin(), a.rend()), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(a.at(2), 4);
  EXPECT_THROW(a.at(3), std::out_of_range);
  SmallShape long_shape = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_FALSE(long_shape.is_inline());
  SmallShape moved = std::move(long_shape);
  EXPECT_EQ(moved.size(), 8u);
  EXPECT_EQ(moved.back(), 8);
  EXPECT_TRUE(long_shape.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  swap(moved, a);
  EXPECT_EQ(a.size(), 8u);
  EXPECT_EQ(moved, (SmallShape{2, 3, 4}));
}

class TensorCopies : public grove::testing::DeviceTest {};

TEST_P(TensorCopies, CopyOfATensorUpToRankSixAllocatesNothing) {
  std::mt19937_64 rng(grove::testing::test_seed());
  for (size_t rank = 0; rank <= SmallShape::kInlineCapacity; ++rank) {
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 3));
    Tensor tensor = Tensor::empty(shape, DType::kF32, device());
    Tensor view = tensor.dim() > 1 ? tensor.transpose(0, 1) : tensor;
    grove::testing::CountAllocations counter;
    std::vector<Tensor> copies;
    copies.reserve(4);
    copies.push_back(tensor);
    copies.push_back(view);
    Tensor assigned;
    assigned = copies[1];
    Tensor moved = std::move(copies[0]);
    EXPECT_EQ(counter.allocations(), 1) << "rank " << rank << ": only the vector's buffer";
    EXPECT_EQ(moved.shape(), shape);
    EXPECT_EQ(assigned.strides(), view.strides());
  }
}

TEST_P(TensorCopies, RankSevenTensorKeepsItsShapeOnTheHeap) {
  Shape shape = {2, 1, 2, 1, 2, 1, 3};
  Tensor tensor = Tensor::empty(shape, DType::kF32, device());
  Tensor copy = tensor;
  EXPECT_EQ(copy.shape(), shape);
  EXPECT_FALSE(copy.shape().is_inline());
  EXPECT_EQ(copy.strides(), (Shape{12, 12, 6, 6, 3, 3, 1}));
  EXPECT_EQ(copy.unsqueeze(0).dim(), 8);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TensorCopies);

}  // namespace
}  // namespace grove::runtime
