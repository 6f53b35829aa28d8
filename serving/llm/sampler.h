// Token choice from one row of logits: greedy (temperature 0) or seeded
// sampling with temperature, top-k and top-p.
//
// Note [Sampling draws]
// Draw i of a request (its i-th generated token) is
// philox_uniform(request seed, i) (compiler/ops/philox.h), the function the
// device kernels use for every random number, so a request's tokens depend on
// its seed and its logits only: not on the batch it shares, the bucket, or the
// other requests' seeds. The candidates are sorted by logit (descending, ties
// by lower token id), cut to top_k, then to the smallest prefix whose
// probability reaches top_p, and the draw picks by inverse CDF over that
// prefix in double precision. Tests: Sampler.* (tests/serving/llm/sampler_test.cc),
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

}  // namespace grove::serving::llm
