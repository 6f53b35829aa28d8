// The decode attention kernel's entry points on cuda (runtime/decode_attention_kernel.h):
// loading the cache after the wait, early, running dry before the wait, or held to four
// blocks an SM give the same bits behind a GEMV that writes the qkv rows right before them.
#include "runtime/decode_attention_kernel.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/blas.h"
#include "runtime/device_context.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::random_floats;

Tensor random_bf16(std::mt19937& rng, const Shape& shape, float low, float high) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  std::vector<uint16_t> bits;
  for (float value : random_floats(rng, static_cast<size_t>(count), low, high)) {
    bits.push_back(float_to_bf16_bits(value));
  }
  return Tensor::from_host(bits.data(), shape, DType::kBF16, kCudaDevice);
}

// GROVE_ATTENTION_EARLY_LOADS, GROVE_ATTENTION_WARM and GROVE_ATTENTION_MANY:
// late, early (the default at few rows), warm (Note [Decode attention runs dry
// before its wait]), many (Note [Decode attention for many rows]).
struct AttentionSetting {
  const char* name;
  const char* early_loads;
  const char* warm;
  const char* many;
};
constexpr AttentionSetting kSettings[] = {{"late", "0", "0", "0"},
                                          {"early", "1", "0", "0"},
                                          {"warm", "1", "1", "0"},
                                          {"many", "1", "0", "1"}};

// One row (the warm kernel's case: GROVE_ATTENTION_WARM applies to one row)
// and two (one of them padding; warm there runs the early kernel), 8 query
// heads over 2 kv heads, head_dim 64: qkv = x W^T by the small-M GEMV (a
// programmatic kernel on compute capability 9.0+, so the attention starts
// while it runs), then the attention in place. Three rounds with new x each:
// a kernel that kept what it read of a qkv row before its wait would give the
// round before's heads.
void check_entry_points(int64_t rows) {
  GROVE_SEEDED_RNG(rng);
  constexpr int64_t kHeads = 8, kKvHeads = 2, kDim = 64, kCacheLen = 48, kHidden = 96;
  constexpr int64_t kWidth = (kHeads + 2 * kKvHeads) * kDim;
  DeviceContext& context = device_context(kCudaDevice);
  Platform& platform = context.platform();
  StreamHandle stream = context.create_stream();
  Tensor w = random_bf16(rng, {kWidth, kHidden}, -0.2f, 0.2f);
  Tensor cos = random_bf16(rng, {kCacheLen, kDim}, -1.0f, 1.0f);
  Tensor sin = random_bf16(rng, {kCacheLen, kDim}, -1.0f, 1.0f);
  Tensor keys = random_bf16(rng, {rows, kKvHeads, kCacheLen, kDim}, -2.0f, 2.0f);
  Tensor values = random_bf16(rng, {rows, kKvHeads, kCacheLen, kDim}, -2.0f, 2.0f);
  const int64_t position_values[2] = {37, -1};
  Tensor positions = Tensor::from_host(position_values, {rows}, DType::kI64, kCudaDevice);
  Tensor qkv = Tensor::empty({rows, kWidth}, DType::kBF16, kCudaDevice);
  for (int round = 0; round < 3; ++round) {
    Tensor x = random_bf16(rng, {rows, kHidden}, -2.0f, 2.0f);
    std::vector<std::vector<uint8_t>> results;
    for (const AttentionSetting& setting : kSettings) {
      ::grove::testing::ScopedEnv early("GROVE_ATTENTION_EARLY_LOADS", setting.early_loads);
      ::grove::testing::ScopedEnv warm("GROVE_ATTENTION_WARM", setting.warm);
      ::grove::testing::ScopedEnv many("GROVE_ATTENTION_MANY", setting.many);
      GemmArgs args;
      args.dtype = DType::kBF16;
      args.m = rows, args.n = kWidth, args.k = kHidden;
      args.a = x.data_ptr(), args.lda = kHidden;
      args.b = w.data_ptr(), args.ldb = kHidden, args.transpose_b = true;
      args.c = qkv.data_ptr(), args.ldc = kWidth;
      platform.blas().gemm_row_major(stream, args);
      launch_decode_attention(qkv, cos, sin, keys, values, positions, kHeads, stream);
      platform.synchronize_stream(stream);
      results.push_back(qkv.to_host_bytes());
    }
    for (size_t other : {1, 2, 3}) {
      EXPECT_EQ(results[0], results[other]) << rows << " rows, round " << round << ": "
                                            << kSettings[other].name << " differs from late";
    }
    // Row 0's attended heads are not all zero; the padding row's are.
    const auto* bits = reinterpret_cast<const uint16_t*>(results[0].data());
    size_t nonzero = 0, padding_nonzero = 0;
    for (int64_t i = 0; i < kHeads * kDim; ++i) {
      nonzero += bits[i] != 0;
      if (rows > 1) padding_nonzero += bits[kWidth + i] != 0;
    }
    EXPECT_GT(nonzero, static_cast<size_t>(kHeads * kDim / 2)) << rows << " rows, round " << round;
    EXPECT_EQ(padding_nonzero, 0u) << rows << " rows, round " << round;
  }
}

TEST(DecodeAttentionKernel, EntryPointsGiveTheSameBitsAfterAProgrammaticGemv) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_entry_points(1);
  check_entry_points(2);
}

}  // namespace
}  // namespace grove::runtime
