// Storage reference counting and poisoning, and Tensor views, host transfers
// and dtype round trips on the sim device.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::random_floats;
using ::grove::testing::random_ints;
using ::grove::testing::random_tensor;

// The element of a contiguous row-major host array at `index`.
float at(const std::vector<float>& data, const Shape& shape, const std::vector<int64_t>& index) {
  Shape strides = contiguous_strides(shape);
  int64_t position = 0;
  for (size_t i = 0; i < index.size(); ++i) position += index[i] * strides[i];
  return data[static_cast<size_t>(position)];
}

template <typename Fn>
void expect_stale(const std::string& message, Fn&& access, const char* what) {
  try {
    access();
    ADD_FAILURE() << what << " of a poisoned tensor did not throw";
  } catch (const StaleTensorError& error) {
    EXPECT_EQ(std::string(error.what()), message) << what;
  }
}

TEST(Storage, WeakReferenceExpiresWhenTheLastTensorAndViewAreGone) {
  GROVE_SEEDED_RNG(rng);
  Tensor tensor = random_tensor(rng, {4, 6});
  WeakStoragePtr weak = tensor.storage();
  Tensor view = tensor.transpose(0, 1);
  EXPECT_EQ(weak.use_count(), 2);
  tensor = Tensor();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(weak.lock().get(), view.storage().get());
  view = Tensor();
  EXPECT_TRUE(weak.expired());
}

TEST(Storage, DroppingTheLastReferenceFreesTheAllocatorBlock) {
  CachingAllocator& allocator = device_context(kSimDevice).allocator();
  size_t live_before = allocator.stats(kDefaultPool).live_blocks;
  Tensor tensor = Tensor::empty({128}, DType::kF32, kSimDevice);
  EXPECT_EQ(allocator.stats(kDefaultPool).live_blocks, live_before + 1);
  Tensor slice = tensor.slice(0, 3, 9);
  tensor = Tensor();
  EXPECT_EQ(allocator.stats(kDefaultPool).live_blocks, live_before + 1);
  slice = Tensor();
  EXPECT_EQ(allocator.stats(kDefaultPool).live_blocks, live_before);
}

// Issue 24: numel * element size wrapped to 0 bytes for [2^30, 2^31] of f64.
TEST(Tensor, EmptyWhoseBytesOverflowIsAShapeError) {
  try {
    Tensor::empty({int64_t{1} << 30, int64_t{1} << 31}, DType::kF64, kSimDevice);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("more bytes than a 64-bit size holds"),
              std::string::npos)
        << error.what();
  }
}

TEST(Storage, PoisonMakesEveryDataAccessThroughEveryViewThrowTheMessage) {
  GROVE_SEEDED_RNG(rng);
  Tensor tensor = random_tensor(rng, {3, 4});
  std::vector<Tensor> views = {tensor.view({12}),      tensor.view({2, -1}),
                               tensor.transpose(0, 1), tensor.permute({1, 0}),
                               tensor.slice(1, 1, 3),  tensor.slice(0, 2, 3).expand({5, 1, 4}),
                               tensor.unsqueeze(1)};
  std::vector<void*> addresses;
  for (const Tensor& view : views) addresses.push_back(view.address());
  void* address = tensor.address();
  const std::string message =
      "output 0 of graph node 7 was overwritten by a later replay; clone() it to keep it";
  tensor.storage()->poison(message);

  EXPECT_TRUE(tensor.storage()->is_poisoned());
  EXPECT_EQ(tensor.storage()->poison_message(), message);
  EXPECT_EQ(tensor.address(), address);  // comparisons keep working
  expect_stale(
      message, [&] { tensor.data_ptr(); }, "data_ptr");
  expect_stale(
      message, [&] { tensor.to_vector<float>(); }, "to_vector");
  expect_stale(
      message, [&] { tensor.to_doubles(); }, "to_doubles");
  std::vector<float> upload(12, 1.5f);
  expect_stale(
      message, [&] { tensor.copy_from_host(upload.data()); }, "copy_from_host");
  expect_stale(
      message, [&] { tensor.storage()->data(); }, "Storage::data");
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE(views[i].str());
    EXPECT_EQ(views[i].address(), addresses[i]);
    expect_stale(
        message, [&] { views[i].data_ptr(); }, "view data_ptr");
    expect_stale(
        message, [&] { views[i].to_vector<float>(); }, "view to_vector");
  }
  // Views made after poisoning touch no data, so they work, and their data stays stale.
  Tensor later = tensor.transpose(0, 1).slice(0, 1, 2);
  EXPECT_EQ(later.address(), static_cast<char*>(address) + sizeof(float));
  expect_stale(
      message, [&] { later.to_doubles(); }, "later view to_doubles");
}

TEST(Storage, PoisonFreesTheOwnedBlockOnce) {
  CachingAllocator& allocator = device_context(kSimDevice).allocator();
  size_t live_before = allocator.stats(kDefaultPool).live_blocks;
  Tensor tensor = Tensor::empty({64}, DType::kF32, kSimDevice);
  Tensor view = tensor.view({8, 8});
  EXPECT_TRUE(tensor.storage()->owns_memory());
  tensor.storage()->poison("stale");
  EXPECT_FALSE(tensor.storage()->owns_memory());
  EXPECT_EQ(allocator.stats(kDefaultPool).live_blocks, live_before);
  tensor = Tensor();
  view = Tensor();
  EXPECT_EQ(allocator.stats(kDefaultPool).live_blocks, live_before);
}

TEST(Storage, ForeignMemoryIsNotOwnedUntilGivenAnOwner) {
  struct CountingOwner : MemoryOwner {
    explicit CountingOwner(int* destroyed) : destroyed(destroyed) {}
    ~CountingOwner() override { ++*destroyed; }
    int* destroyed;
  };
  std::vector<float> memory(16, 2.0f);
  auto storage = std::make_shared<Storage>(memory.data(), 64, kSimDevice, nullptr);
  EXPECT_FALSE(storage->owns_memory());
  EXPECT_EQ(storage->data(), memory.data());
  int destroyed = 0;
  storage->set_owner(std::make_unique<CountingOwner>(&destroyed));
  EXPECT_TRUE(storage->owns_memory());
  storage->set_owner(std::make_unique<CountingOwner>(&destroyed));  // the first owner goes
  EXPECT_EQ(destroyed, 1);
  std::unique_ptr<MemoryOwner> released = storage->release_owner();
  EXPECT_FALSE(storage->owns_memory());
  storage.reset();
  EXPECT_EQ(destroyed, 1);
  released.reset();
  EXPECT_EQ(destroyed, 2);
}

TEST(Tensor, ScalarHoldsTheValueStoredAsItsDtype) {
  Tensor half = Tensor::scalar(2.5, DType::kF16, kSimDevice);
  EXPECT_EQ(half.shape(), Shape{});
  EXPECT_EQ(half.dtype(), DType::kF16);
  EXPECT_EQ(half.to_doubles(), std::vector<double>{2.5});
  EXPECT_EQ(Tensor::scalar(-3.7, DType::kI64, kSimDevice).to_doubles(), std::vector<double>{-3});
  EXPECT_EQ(Tensor::scalar(0.1, DType::kF32, kSimDevice).to_doubles(),
            std::vector<double>{static_cast<float>(0.1)});
}

TEST(TensorViews, ViewReshapesAContiguousTensorAndInfersOneExtent) {
  GROVE_SEEDED_RNG(rng);
  Tensor tensor = random_tensor(rng, {2, 3, 4});
  EXPECT_EQ(tensor.strides(), (Shape{12, 4, 1}));
  Tensor view = tensor.view({4, -1});
  EXPECT_EQ(view.shape(), (Shape{4, 6}));
  EXPECT_EQ(view.strides(), (Shape{6, 1}));
  EXPECT_EQ(view.storage(), tensor.storage());
  EXPECT_EQ(view.to_vector<float>(), tensor.to_vector<float>());
  EXPECT_EQ(tensor.view({-1}).shape(), (Shape{24}));
}

TEST(TensorViews, ViewRejectsBadShapesAndNonContiguousTensors) {
  Tensor tensor = Tensor::empty({2, 3, 4}, DType::kF32, kSimDevice);
  EXPECT_THROW(tensor.view({-1, -1}), ShapeError);
  EXPECT_THROW(tensor.view({5, -1}), ShapeError);
  EXPECT_THROW(tensor.view({5, 5}), ShapeError);
  EXPECT_THROW(tensor.view({-2, 12}), ShapeError);
  try {
    tensor.transpose(0, 2).view({24});
    ADD_FAILURE() << "view of a transposed tensor was accepted";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("non-contiguous"), std::string::npos) << error.what();
  }
}

TEST(TensorViews, TransposeAndPermuteReorderShapeAndStrides) {
  Tensor tensor = Tensor::empty({2, 3, 4}, DType::kF32, kSimDevice);
  Tensor transposed = tensor.transpose(0, -1);
  EXPECT_EQ(transposed.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(transposed.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(transposed.is_contiguous());
  Tensor permuted = tensor.permute({1, 2, 0});
  EXPECT_EQ(permuted.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(permuted.strides(), (Shape{4, 1, 12}));
  EXPECT_TRUE(tensor.permute({0, 1, 2}).is_contiguous());
  EXPECT_EQ(tensor.size(-1), 4);

  EXPECT_THROW(tensor.transpose(0, 3), ShapeError);
  EXPECT_THROW(tensor.transpose(-4, 0), ShapeError);
  EXPECT_THROW(tensor.permute({0, 1}), ShapeError);
  EXPECT_THROW(tensor.permute({0, 1, 1}), ShapeError);
  EXPECT_THROW(tensor.permute({0, 1, 3}), ShapeError);
  EXPECT_THROW(tensor.size(3), ShapeError);
}

TEST(TensorViews, SliceNarrowsOneDimensionAndMovesTheOffset) {
  Tensor tensor = Tensor::empty({4, 6}, DType::kF32, kSimDevice);
  Tensor columns = tensor.slice(1, 2, 5);
  EXPECT_EQ(columns.shape(), (Shape{4, 3}));
  EXPECT_EQ(columns.strides(), (Shape{6, 1}));
  EXPECT_EQ(columns.offset(), 2);
  EXPECT_EQ(columns.address(), static_cast<char*>(tensor.address()) + 2 * sizeof(float));
  Tensor rows = tensor.slice(-2, 1, 3).slice(1, 4, 6);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.offset(), 6 + 4);
  EXPECT_EQ(tensor.slice(0, 2, 2).numel(), 0);

  EXPECT_THROW(tensor.slice(1, 4, 3), ShapeError);
  EXPECT_THROW(tensor.slice(1, 0, 7), ShapeError);
  EXPECT_THROW(tensor.slice(1, -1, 2), ShapeError);
  EXPECT_THROW(tensor.slice(2, 0, 1), ShapeError);
}

TEST(TensorViews, ExpandBroadcastsSizeOneDimensionsWithStrideZero) {
  Tensor tensor = Tensor::empty({3, 1}, DType::kF32, kSimDevice);
  Tensor expanded = tensor.expand({2, 3, 5});
  EXPECT_EQ(expanded.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(expanded.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(expanded.storage(), tensor.storage());
  EXPECT_EQ(tensor.expand({3, 1}).strides(), tensor.strides());

  EXPECT_THROW(tensor.expand({4, 5}), ShapeError);  // 3 does not broadcast to 4
  EXPECT_THROW(tensor.expand({3}), ShapeError);     // fewer dimensions
}

TEST(TensorViews, UnsqueezeInsertsASizeOneDimension) {
  Tensor tensor = Tensor::empty({3, 4}, DType::kF32, kSimDevice);
  EXPECT_EQ(tensor.unsqueeze(0).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(tensor.unsqueeze(0).strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(tensor.unsqueeze(1).shape(), (Shape{3, 1, 4}));
  EXPECT_EQ(tensor.unsqueeze(1).strides(), (Shape{4, 4, 1}));
  EXPECT_EQ(tensor.unsqueeze(-1).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(tensor.unsqueeze(2).strides(), (Shape{4, 1, 1}));
  EXPECT_TRUE(tensor.unsqueeze(1).is_contiguous());
  EXPECT_THROW(tensor.unsqueeze(3), ShapeError);
  EXPECT_THROW(tensor.unsqueeze(-4), ShapeError);
}

TEST(TensorViews, ConstructorRejectsViewsReachingOutsideTheStorage) {
  Tensor tensor = Tensor::empty({4, 4}, DType::kF32, kSimDevice);
  const StoragePtr& storage = tensor.storage();
  EXPECT_NO_THROW(Tensor(storage, {4, 4}, {1, 4}, 0, DType::kF32));
  EXPECT_NO_THROW(Tensor(storage, {2}, {1}, 14, DType::kF32));
  EXPECT_THROW(Tensor(storage, {2}, {1}, 15, DType::kF32), ShapeError);
  EXPECT_THROW(Tensor(storage, {4, 4}, {5, 1}, 0, DType::kF32), ShapeError);
  EXPECT_THROW(Tensor(storage, {16}, {1}, 0, DType::kF64), ShapeError);
  EXPECT_THROW(Tensor(storage, {2}, {-1}, 0, DType::kF32), ShapeError);
  EXPECT_THROW(Tensor(storage, {2, 2}, {1}, 0, DType::kF32), ShapeError);
  EXPECT_THROW(Tensor(storage, {-1}, {1}, 0, DType::kF32), ShapeError);
  EXPECT_THROW(Tensor::empty({2, -3}, DType::kF32, kSimDevice), ShapeError);
}

TEST(TensorViews, ToVectorOfStridedViewsMatchesHostIndexing) {
  GROVE_SEEDED_RNG(rng);
  const Shape shape = {3, 4, 5};
  std::vector<float> data = random_floats(rng, 60);
  Tensor tensor = Tensor::from_vector(data, shape, kSimDevice);

  std::vector<float> expected;
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t i = 0; i < 3; ++i) expected.push_back(at(data, shape, {i, j, k}));
  EXPECT_EQ(tensor.transpose(0, 2).to_vector<float>(), expected);

  expected.clear();
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t k = 0; k < 5; ++k)
      for (int64_t i = 0; i < 3; ++i) expected.push_back(at(data, shape, {i, j, k}));
  EXPECT_EQ(tensor.permute({1, 2, 0}).to_vector<float>(), expected);

  expected.clear();
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 2; k < 4; ++k) expected.push_back(at(data, shape, {i, j, k}));
  EXPECT_EQ(tensor.slice(0, 1, 3).slice(2, 2, 4).to_vector<float>(), expected);

  expected.clear();  // a column broadcast: [3, 4, 1] -> [2, 3, 4, 6]
  Tensor column = tensor.slice(2, 3, 4);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t r = 0; r < 6; ++r) expected.push_back(at(data, shape, {i, j, 3}));
  EXPECT_EQ(column.expand({2, 3, 4, 6}).to_vector<float>(), expected);

  expected.clear();
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 3; ++i) expected.push_back(at(data, shape, {i, j, 1}));
  EXPECT_EQ(tensor.slice(2, 1, 2).transpose(0, 1).unsqueeze(0).to_vector<float>(), expected);
}

TEST(TensorHost, EmptyTensorsTransferNothing) {
  Tensor tensor = Tensor::empty({0, 3}, DType::kF32, kSimDevice);
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_TRUE(tensor.is_contiguous());
  EXPECT_TRUE(Tensor::empty({3, 0}, DType::kF32, kSimDevice).is_contiguous());
  EXPECT_EQ(tensor.view({3, 0}).shape(), (Shape{3, 0}));
  EXPECT_TRUE(tensor.to_vector<float>().empty());
  EXPECT_TRUE(Tensor::from_vector(std::vector<int64_t>{}, {2, 0}, kSimDevice).to_doubles().empty());
}

TEST(TensorHost, FromVectorNeedsAMatchingElementCountAndToVectorAMatchingType) {
  GROVE_SEEDED_RNG(rng);
  EXPECT_THROW(Tensor::from_vector(random_floats(rng, 5), {2, 3}, kSimDevice), ShapeError);
  Tensor floats = Tensor::from_vector(random_floats(rng, 6), {2, 3}, kSimDevice);
  EXPECT_THROW(floats.to_vector<int32_t>(), DTypeError);
  EXPECT_THROW(floats.to_vector<double>(), DTypeError);
  EXPECT_THROW(floats.to_vector<uint16_t>(), DTypeError);
  Tensor ints = Tensor::from_vector(std::vector<int32_t>{3, -1}, {2}, kSimDevice);
  EXPECT_THROW(ints.to_vector<float>(), DTypeError);
  EXPECT_EQ(ints.to_vector<uint32_t>(), (std::vector<uint32_t>{3u, 0xffffffffu}));  // raw bits
}

TEST(TensorHost, CopyFromHostOverwritesAContiguousTensorOnly) {
  GROVE_SEEDED_RNG(rng);
  Tensor tensor = Tensor::from_vector(random_floats(rng, 12), {3, 4}, kSimDevice);
  std::vector<float> fresh = random_floats(rng, 12);
  tensor.copy_from_host(fresh.data());
  EXPECT_EQ(tensor.to_vector<float>(), fresh);
  EXPECT_THROW(tensor.transpose(0, 1).copy_from_host(fresh.data()), ShapeError);
}

TEST(TensorHost, EveryDTypeRoundTripsThroughTheDevice) {
  GROVE_SEEDED_RNG(rng);
  const Shape shape = {3, 5};
  const size_t n = 15;

  std::vector<float> f32 = random_floats(rng, n, -1e6f, 1e6f);
  Tensor t_f32 = Tensor::from_vector(f32, shape, kSimDevice);
  EXPECT_EQ(t_f32.dtype(), DType::kF32);
  EXPECT_EQ(t_f32.to_vector<float>(), f32);
  EXPECT_EQ(t_f32.to_doubles(), std::vector<double>(f32.begin(), f32.end()));

  std::vector<double> f64;
  for (float value : random_floats(rng, n)) f64.push_back(static_cast<double>(value) / 3.0);
  Tensor t_f64 = Tensor::from_vector(f64, shape, kSimDevice);
  EXPECT_EQ(t_f64.dtype(), DType::kF64);
  EXPECT_EQ(t_f64.to_vector<double>(), f64);
  EXPECT_EQ(t_f64.to_doubles(), f64);

  std::vector<int32_t> i32;
  for (int64_t value : random_ints(rng, n, -2000000000, 2000000000)) {
    i32.push_back(static_cast<int32_t>(value));
  }
  Tensor t_i32 = Tensor::from_vector(i32, shape, kSimDevice);
  EXPECT_EQ(t_i32.dtype(), DType::kI32);
  EXPECT_EQ(t_i32.to_vector<int32_t>(), i32);
  EXPECT_EQ(t_i32.to_doubles(), std::vector<double>(i32.begin(), i32.end()));

  std::vector<int64_t> i64 = random_ints(rng, n, -(int64_t{1} << 50), int64_t{1} << 50);
  Tensor t_i64 = Tensor::from_vector(i64, shape, kSimDevice);
  EXPECT_EQ(t_i64.dtype(), DType::kI64);
  EXPECT_EQ(t_i64.to_vector<int64_t>(), i64);
  EXPECT_EQ(t_i64.to_doubles(), std::vector<double>(i64.begin(), i64.end()));

  std::vector<bool> flags;
  std::bernoulli_distribution coin(0.5);
  for (size_t i = 0; i < n; ++i) flags.push_back(i == 0 ? true : coin(rng));
  Tensor t_bool = Tensor::from_vector(flags, shape, kSimDevice);
  EXPECT_EQ(t_bool.dtype(), DType::kBool);
  EXPECT_EQ(t_bool.to_vector<bool>(), flags);
  EXPECT_EQ(t_bool.to_doubles(), std::vector<double>(flags.begin(), flags.end()));
  EXPECT_EQ(t_bool.transpose(0, 1).to_vector<bool>().size(), n);

  // 16-bit floats travel as raw bits; to_doubles decodes them.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<uint16_t> bits;
    std::vector<double> decoded;
    for (float value : random_floats(rng, n, -100.0f, 100.0f)) {
      uint16_t b = dtype == DType::kF16 ? float_to_f16_bits(value) : float_to_bf16_bits(value);
      bits.push_back(b);
      decoded.push_back(dtype == DType::kF16 ? f16_bits_to_float(b) : bf16_bits_to_float(b));
      EXPECT_NEAR(decoded.back(), value, std::abs(value) * (dtype == DType::kF16 ? 1e-3 : 8e-3));
    }
    Tensor t = Tensor::from_host(bits.data(), shape, dtype, kSimDevice);
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.to_vector<uint16_t>(), bits);
    EXPECT_EQ(t.to_doubles(), decoded);
  }
}

}  // namespace
}  // namespace grove::runtime
