// The sequence attention kernel (Note [Sequence attention kernel]) on every
// device against a float64 reference: query, key and value read in place as
// strided views of one fused projection, results written heads-last,
// grouped-query heads, causal, bool and additive masks (a fully masked row
// gives zeros), bf16 and f16; operands it does not take are refused with the
// reason, and a graph captured with it reads its operands at every replay.
#include "runtime/sequence_attention_kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::random_floats;

// A [B, T, H, D] view of columns [first, first + H * D) of `rows` [B, T, W],
// as [B, H, T, D] (heads split out of a fused projection).
Tensor heads_of(const Tensor& rows, int64_t first, int64_t heads, int64_t d) {
  const Shape& shape = rows.shape();
  const int64_t width = shape[2];
  return Tensor(rows.storage(), {shape[0], heads, shape[1], d}, {shape[1] * width, d, width, 1},
                rows.offset() + first, rows.dtype());
}

// softmax(q k^T * scale + mask) v in double, from the operands' values
// (row-major over their logical shapes [B, H, T, D]); mask [B, H, Tq, Tk]
// expanded, kind 0 none, 1 bool, 2 additive.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              int kind, bool causal, double scale) {
  const std::vector<double> qs = q.to_doubles(), ks = k.to_doubles(), vs = v.to_doubles();
  const std::vector<double> ms = kind ? mask.to_doubles() : std::vector<double>();
  const int64_t b = q.shape()[0], h = q.shape()[1], tq = q.shape()[2], d = q.shape()[3];
  const int64_t hk = k.shape()[1], tk = k.shape()[2], dv = v.shape()[3];
  std::vector<double> out(static_cast<size_t>(b * h * tq * dv));
  for (int64_t n = 0; n < b; ++n) {
    for (int64_t head = 0; head < h; ++head) {
      const int64_t kh = head / (h / hk);
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> scores(static_cast<size_t>(tk));
        double most = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < tk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += qs[static_cast<size_t>(((n * h + head) * tq + i) * d + c)] *
                   ks[static_cast<size_t>(((n * hk + kh) * tk + j) * d + c)];
          }
          double score = dot * scale;
          const double m = kind ? ms[static_cast<size_t>(((n * h + head) * tq + i) * tk + j)] : 0;
          if (kind == 1 && m == 0) score = -std::numeric_limits<double>::infinity();
          if (kind == 2) score += m;
          if (causal && j > i) score = -std::numeric_limits<double>::infinity();
          scores[static_cast<size_t>(j)] = score;
          most = std::max(most, score);
        }
        double total = 0;
        for (double& score : scores) {
          score = std::isinf(most) ? 0 : std::exp(score - most);
          total += score;
        }
        for (int64_t f = 0; f < dv; ++f) {
          double sum = 0;
          for (int64_t j = 0; j < tk; ++j) {
            sum += scores[static_cast<size_t>(j)] *
                   vs[static_cast<size_t>(((n * hk + kh) * tk + j) * dv + f)];
          }
          out[static_cast<size_t>(((n * h + head) * tq + i) * dv + f)] =
              total > 0 ? sum / total : 0;
        }
      }
    }
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& expected,
                  double tolerance) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], tolerance * (1 + std::abs(expected[i]))) << "element " << i;
  }
}

Tensor random_of(std::mt19937& rng, const Shape& shape, DType dtype, Device device) {
  Tensor values = Tensor::from_vector(
      random_floats(rng, static_cast<size_t>(shape_numel(shape)), -1.5f, 1.5f), shape, kSimDevice);
  if (dtype == DType::kF32 && device == kSimDevice) return values;
  // Round through the dtype on the host, then move to the device.
  std::vector<double> doubles = values.to_doubles();
  Tensor out = Tensor::empty(shape, dtype, device);
  std::vector<uint16_t> bits(doubles.size());
  std::vector<float> floats(doubles.begin(), doubles.end());
  if (dtype == DType::kF32) {
    out.copy_from_host(floats.data());
    return out;
  }
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = dtype == DType::kBF16 ? float_to_bf16_bits(floats[i]) : float_to_f16_bits(floats[i]);
  }
  out.copy_from_host(bits.data());
  return out;
}

double tolerance_of(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

class SequenceAttentionTest : public ::grove::testing::DeviceTest {};

TEST_P(SequenceAttentionTest, ReadsAFusedProjectionInPlaceAndWritesHeadsLast) {
  GROVE_SEEDED_RNG(rng);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Four query heads over two key heads of 8 features, causal, 5 positions.
    const int64_t b = 3, t = 5, h = 4, hk = 2, d = 8;
    Tensor qkv = random_of(rng, {b, t, (h + 2 * hk) * d}, dtype, device());
    Tensor q = heads_of(qkv, 0, h, d);
    Tensor k = heads_of(qkv, h * d, hk, d);
    Tensor v = heads_of(qkv, (h + hk) * d, hk, d);
    Tensor merged = Tensor::empty({b, t, h * d}, dtype, device());
    Tensor out = heads_of(merged, 0, h, d);  // [B, H, T, D] laid out [B, T, H, D]
    launch_sequence_attention(q, k, v, Tensor(), out, 0.3f, /*causal=*/true,
                              device_context(device()).current_stream());
    expect_close(out.to_doubles(), reference(q, k, v, Tensor(), 0, true, 0.3), tolerance_of(dtype));
  }
}

TEST_P(SequenceAttentionTest, BoolAndAdditiveMasksBroadcastAndAFullyMaskedRowGivesZeros) {
  GROVE_SEEDED_RNG(rng);
  const int64_t b = 2, h = 3, tq = 4, tk = 37, d = 40, dv = 24;  // keys past one warp's 32
  Tensor q = random_of(rng, {b, h, tq, d}, DType::kF32, device());
  Tensor k = random_of(rng, {b, h, tk, d}, DType::kF32, device());
  Tensor v = random_of(rng, {b, h, tk, dv}, DType::kF32, device());
  std::vector<uint8_t> keep(static_cast<size_t>(b * tq * tk));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = (rng() % 3) != 0 ? 1 : 0;
  for (int64_t j = 0; j < tk; ++j) keep[static_cast<size_t>(1 * tk + j)] = 0;  // batch 0 row 1
  Tensor bool_mask = Tensor::empty({b, 1, tq, tk}, DType::kBool, device());
  bool_mask.copy_from_host(keep.data());
  Tensor out = Tensor::empty({b, h, tq, dv}, DType::kF32, device());
  launch_sequence_attention(q, k, v, bool_mask, out, 0.2f, false,
                            device_context(device()).current_stream());
  std::vector<double> got = out.to_doubles();
  expect_close(got, reference(q, k, v, bool_mask.expand({b, h, tq, tk}), 1, false, 0.2), 1e-5);
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t f = 0; f < dv; ++f) {
      EXPECT_EQ(got[static_cast<size_t>((head * tq + 1) * dv + f)], 0.0) << "head " << head;
    }
  }
  Tensor additive = random_of(rng, {b, 1, 1, tk}, DType::kF32, device());
  launch_sequence_attention(q, k, v, additive, out, 0.2f, true,
                            device_context(device()).current_stream());
  expect_close(out.to_doubles(), reference(q, k, v, additive.expand({b, h, tq, tk}), 2, true, 0.2),
               1e-5);
}

// Note [Sequence attention staging passes]: 48 and 64 keys stage in one pass
// of the wide kernel, 80 in two; with GROVE_SEQUENCE_ATTENTION_WIDE=0 the
// narrow kernel (two or three passes) gives the same bits (on cuda these are
// two kernels; sim runs one host function for both).
TEST_P(SequenceAttentionTest, SixtyFourKeysStageInOnePassAndMatchTheReference) {
  GROVE_SEEDED_RNG(rng);
  for (int64_t tk : {48, 64, 80}) {
    SCOPED_TRACE(tk);
    const int64_t b = 3, h = 4, tq = 32, d = 64;
    Tensor q = random_of(rng, {b, h, tq, d}, DType::kF32, device());
    Tensor kv = random_of(rng, {b, tk, 2 * h * d}, DType::kF32, device());
    Tensor k = heads_of(kv, 0, h, d);
    Tensor v = heads_of(kv, h * d, h, d);
    Tensor wide = Tensor::empty({b, h, tq, d}, DType::kF32, device());
    Tensor narrow = Tensor::empty({b, h, tq, d}, DType::kF32, device());
    // Register staging: the wide and narrow kernels (f32 stages by cp.async by default).
    ::setenv("GROVE_SEQUENCE_ATTENTION_ASYNC", "0", 1);
    launch_sequence_attention(q, k, v, Tensor(), wide, 0.125f, false,
                              device_context(device()).current_stream());
    ::setenv("GROVE_SEQUENCE_ATTENTION_WIDE", "0", 1);
    launch_sequence_attention(q, k, v, Tensor(), narrow, 0.125f, false,
                              device_context(device()).current_stream());
    ::unsetenv("GROVE_SEQUENCE_ATTENTION_WIDE");
    ::unsetenv("GROVE_SEQUENCE_ATTENTION_ASYNC");
    const std::vector<double> got = wide.to_doubles();
    expect_close(got, reference(q, k, v, Tensor(), 0, false, 0.125), 1e-5);
    EXPECT_EQ(got, narrow.to_doubles());
  }
}

// Note [Sequence attention staged by cp.async]: f32 staged by cp.async gives
// the bits of register staging (wide and narrow), at every query-row tiling
// GROVE_SEQUENCE_ATTENTION_ROWS picks, for the zoo's shapes (ViT's 17
// positions, nn.TransformerDecoder's 32 queries over 48 keys, 64 keys) read
// in place from a fused projection under a broadcast bool mask; a tiling it
// does not know is a ConfigError that launches nothing.
TEST_P(SequenceAttentionTest, AsyncStagingGivesTheBitsOfRegisterStaging) {
  GROVE_SEEDED_RNG(rng);
  const StreamHandle stream = device_context(device()).current_stream();
  for (const auto& [tq, tk] : {std::pair<int64_t, int64_t>{17, 17}, {32, 48}, {5, 64}}) {
    SCOPED_TRACE(::testing::Message() << tq << " queries, " << tk << " keys");
    const int64_t b = 3, h = 3, d = 64;
    Tensor q = random_of(rng, {b, h, tq, d}, DType::kF32, device());
    Tensor kv = random_of(rng, {b, tk, 2 * h * d}, DType::kF32, device());
    Tensor k = heads_of(kv, 0, h, d);
    Tensor v = heads_of(kv, h * d, h, d);
    std::vector<uint8_t> keep(static_cast<size_t>(b * tk));
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = (rng() % 4) != 0 ? 1 : 0;
    Tensor mask = Tensor::empty({b, 1, 1, tk}, DType::kBool, device());
    mask.copy_from_host(keep.data());
    Tensor out = Tensor::empty({b, h, tq, d}, DType::kF32, device());
    launch_sequence_attention(q, k, v, mask, out, 0.125f, false, stream);
    const std::vector<double> expected = out.to_doubles();
    expect_close(expected, reference(q, k, v, mask.expand({b, h, tq, tk}), 1, false, 0.125), 1e-5);
    for (const char* staging : {"1", "0", "vector"}) {
      for (const char* wide : {"1", "0"}) {
        for (const char* rows : {"4", "8", "16"}) {
          SCOPED_TRACE(::testing::Message()
                       << "async " << staging << ", wide " << wide << ", rows " << rows);
          ::setenv("GROVE_SEQUENCE_ATTENTION_ASYNC", staging, 1);
          ::setenv("GROVE_SEQUENCE_ATTENTION_WIDE", wide, 1);
          ::setenv("GROVE_SEQUENCE_ATTENTION_ROWS", rows, 1);
          Tensor again = Tensor::empty({b, h, tq, d}, DType::kF32, device());
          launch_sequence_attention(q, k, v, mask, again, 0.125f, false, stream);
          EXPECT_EQ(again.to_doubles(), expected);
        }
      }
    }
    ::setenv("GROVE_SEQUENCE_ATTENTION_ROWS", "3", 1);
    EXPECT_THROW(launch_sequence_attention(q, k, v, mask, out, 0.125f, false, stream), ConfigError);
    ::unsetenv("GROVE_SEQUENCE_ATTENTION_ASYNC");
    ::unsetenv("GROVE_SEQUENCE_ATTENTION_WIDE");
    ::unsetenv("GROVE_SEQUENCE_ATTENTION_ROWS");
    EXPECT_EQ(out.to_doubles(), expected);  // the refused launch wrote nothing
  }
}

TEST_P(SequenceAttentionTest, RefusesWhatItDoesNotTakeAndSaysWhy) {
  SequenceAttentionLayouts layouts;
  const Shape big{1, 2, 300, 64};
  layouts.query = {big, contiguous_strides(big)};
  layouts.key = layouts.query;
  layouts.value = layouts.query;
  layouts.result = layouts.query;
  EXPECT_NE(sequence_attention_refusal(layouts).find("shared memory"), std::string::npos);
  // Leading dims [2, 3] whose strides do not collapse into one.
  const Shape shape{2, 3, 2, 4, 8};
  layouts.query = {shape, {1000, 64, 32, 8, 1}};
  layouts.key = {shape, contiguous_strides(shape)};
  layouts.value = layouts.key;
  layouts.result = layouts.key;
  EXPECT_NE(sequence_attention_refusal(layouts).find("one batch stride"), std::string::npos);
  layouts.query = layouts.key;
  EXPECT_EQ(sequence_attention_refusal(layouts), "");
  layouts.dtype = DType::kI64;
  EXPECT_NE(sequence_attention_refusal(layouts).find("dtype"), std::string::npos);
  Tensor q = Tensor::empty(big, DType::kF32, device());
  EXPECT_THROW(launch_sequence_attention(q, q, q, Tensor(), q, 1.0f, false,
                                         device_context(device()).current_stream()),
               ShapeError);
}

TEST_P(SequenceAttentionTest, CapturedAttentionReadsItsOperandsAtEveryReplay) {
  GROVE_SEEDED_RNG(rng);
  DeviceContext& context = device_context(device());
  StreamHandle stream = context.create_stream();
  PoolId pool = context.allocator().create_pool();
  {
    StreamGuard guard(device(), stream);
    const Shape shape{2, 2, 6, 16};
    Tensor q = random_of(rng, shape, DType::kF32, device());
    Tensor out = Tensor::empty(shape, DType::kF32, device());
    GraphRecording recording(device());
    recording.capture_begin(stream, pool);
    launch_sequence_attention(q, q, q, Tensor(), out, 0.25f, true, stream);
    recording.capture_end();
    recording.instantiate();
    for (int replay = 0; replay < 2; ++replay) {
      std::vector<float> values = random_floats(rng, static_cast<size_t>(shape_numel(shape)));
      q.copy_from_host(values.data());
      recording.replay(stream);
      expect_close(out.to_doubles(), reference(q, q, q, Tensor(), 0, true, 0.25), 1e-5);
    }
  }
  context.allocator().release_pool(pool);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(SequenceAttentionTest);

}  // namespace
}  // namespace grove::runtime
