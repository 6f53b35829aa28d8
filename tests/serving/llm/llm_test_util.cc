#include "tests/serving/llm/llm_test_util.h"

#include <algorithm>
#include <random>
#include <utility>

namespace grove::serving::llm::testing {

DecoderConfig tiny_config(Architecture architecture, runtime::DType dtype) {
  DecoderConfig config;
  config.architecture = architecture;
  config.vocab_size = 97;
  config.hidden_size = 32;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_kv_heads = architecture == Architecture::kLlama ? 2 : 4;
  config.head_dimension = 8;
  config.intermediate_size = architecture == Architecture::kLlama ? 48 : 128;
  config.max_position_embeddings = 64;
  config.norm_eps = architecture == Architecture::kLlama ? 1e-6 : 1e-5;
  config.tie_word_embeddings = architecture == Architecture::kGpt2;
  config.dtype = dtype;
  return config;
}

void fill_random_weights(DecoderState& state, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 0.5);
  for (const std::string& name : state.weight_names()) {
    runtime::Tensor tensor = state.tensor(name);
    const bool norm =
        name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos;
    const bool bias = name.ends_with(".bias");
    const size_t element = runtime::dtype_size(tensor.dtype());
    std::vector<uint8_t> bytes(static_cast<size_t>(tensor.numel()) * element);
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      double value = normal(rng);
      if (norm && !bias) value = 1 + 0.1 * value;
      runtime::store_element(bytes.data() + static_cast<size_t>(i) * element, tensor.dtype(),
                             value);
    }
    tensor.copy_from_host(bytes.data());
  }
}

std::vector<int64_t> tokens_not_in(const std::vector<int64_t>& run, size_t count) {
  std::vector<int64_t> tokens;
  for (int64_t token = 0; tokens.size() < count; ++token) {
    if (std::find(run.begin(), run.end(), token) == run.end()) tokens.push_back(token);
  }
  return tokens;
}

int64_t argmax(const std::vector<float>& logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

float top_margin(const std::vector<float>& logits) {
  std::vector<float> sorted = logits;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return sorted[0] - sorted[1];
}

std::unique_ptr<Decoder> warmed_tiny_decoder(runtime::Device device, Architecture architecture,
                                             runtime::DType dtype, uint64_t seed,
                                             int64_t max_seq_len) {
  DecoderOptions options;
  options.device = device;
  options.max_seq_len = max_seq_len;
  options.batch_buckets = {1, 2, 4};
  options.prompt_buckets = {8, 16};
  auto decoder = std::make_unique<Decoder>(tiny_config(architecture, dtype), options);
  fill_random_weights(decoder->state(), seed);
  decoder->warm_up();
  return decoder;
}

GenerationRequest generation_request(std::vector<int64_t> prompt, int64_t max_new_tokens,
                                     SamplingParams sampling) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.sampling = sampling;
  return r;
}

}  // namespace grove::serving::llm::testing
