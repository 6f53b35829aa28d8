// Tiny LLaMA and GPT-2 configs with seeded random weights for decoder tests on sim.
#pragma once

#include <cstdint>
#include <vector>

#include "serving/llm/decoder.h"

namespace grove::serving::llm::testing {

// A tiny config: hidden 32, 2 layers, 4 heads (2 kv heads for LLaMA), vocab 97.
DecoderConfig tiny_config(Architecture architecture, runtime::DType dtype);
// Fills every weight of `state` with normal(0, 0.5) values from `seed` (norm weights near 1).
void fill_random_weights(DecoderState& state, uint64_t seed);
int64_t argmax(const std::vector<float>& logits);
// The highest logit minus the second highest.
float top_margin(const std::vector<float>& logits);

}  // namespace grove::serving::llm::testing
