// Tiny LLaMA and GPT-2 configs with seeded random weights for decoder tests on sim.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device.h"
#include "serving/llm/decoder.h"
#include "serving/llm/generator.h"

namespace grove::serving::llm::testing {

// A tiny config: hidden 32, 2 layers, 4 heads (2 kv heads for LLaMA), vocab 97.
DecoderConfig tiny_config(Architecture architecture, runtime::DType dtype);
// Fills every weight of `state` with normal(0, 0.5) values from `seed` (norm weights near 1).
void fill_random_weights(DecoderState& state, uint64_t seed);
// A tiny_config decoder on `device` with fill_random_weights(seed), batch
// buckets 1, 2, 4 and prompt buckets 8, 16, warmed up.
std::unique_ptr<Decoder> warmed_tiny_decoder(runtime::Device device, Architecture architecture,
                                             runtime::DType dtype, uint64_t seed,
                                             int64_t max_seq_len = 32);
// A generation request for `prompt`, at most `max_new_tokens` new tokens.
GenerationRequest generation_request(std::vector<int64_t> prompt, int64_t max_new_tokens,
                                     SamplingParams sampling = {});
// The `count` smallest token ids that `run` does not hold.
std::vector<int64_t> tokens_not_in(const std::vector<int64_t>& run, size_t count);
int64_t argmax(const std::vector<float>& logits);
// The highest logit minus the second highest.
float top_margin(const std::vector<float>& logits);

}  // namespace grove::serving::llm::testing
