// Token choice from one row of logits: greedy (temperature 0) or seeded
// sampling with temperature, top-k and top-p.
//
// Note [Sampling draws]
// Draw i of a request (its i-th generated token) uses u = philox_uniform(seed,
// i) (compiler/ops/philox.h, the function every device kernel draws from), so
// a request's tokens depend on its seed and its logits only: not on the batch
// it shares, the bucket, or the other requests' seeds. The device kernel of
// DecodeLoop (decode_kernels.cu) is the definition and sample_token() its
// bit-exact host reference; both run the steps below with the shared
// arithmetic of sampling_math.h, the row split into 256 contiguous chunks and
// every sum taken over a chunk in index order, then over chunks in order:
//   greedy (temperature 0): the first index of the largest logit;
//   otherwise the weight of token j is exp((logit_j - max) / temperature) in
//   double; top_k keeps the tokens whose logit is >= the k-th largest (ties at
//   the cut are all kept); top_p then keeps the tokens whose logit is >= the
//   largest cut whose kept mass still reaches top_p times the top-k mass (ties
//   again kept); the token is the inverse CDF of the kept weights in index
//   order at u times their total.
// Cuts are found by a bitwise search over the logits' order keys (32 rounds of
// counts or masses), so no sort is needed on the device. Tests: Sampler.*
// (tests/serving/llm/sampler_test.cc), DecodeLoopTest.DeviceSamplingMatchesTheHostReference
// (tests/serving/llm/decode_loop_test.cc),
// Generator.RequestsGetTheSameTokensAloneAsInAnyBatch.
#pragma once

#include <cstdint>
#include <vector>

namespace grove::serving::llm {

struct SamplingParams {
  double temperature = 0;  // 0: greedy (argmax, the lowest id among equal logits)
  int64_t top_k = 0;       // 0: no cut
  double top_p = 1;        // 1: no cut
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0; }
  // Throws grove::Error naming the parameter out of range.
  void verify() const;
};

// The token for draw `draw` of a request with `params`.
int64_t sample_token(const std::vector<float>& logits, const SamplingParams& params, uint64_t draw);
int64_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     uint64_t draw);

}  // namespace grove::serving::llm
