#include "benchmarks/decode/decode_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/common/flags.h"
#include "runtime/error.h"
#include "serving/llm/decoder_program.h"
#include "weights/safetensors.h"

namespace grove::benchmarks {

namespace {

using serving::llm::DecoderConfig;

nlohmann::json config_json(const DecoderConfig& config) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", config.vocab_size},
          {"hidden_size", config.hidden_size},
          {"num_hidden_layers", config.num_layers},
          {"num_attention_heads", config.num_heads},
          {"num_key_value_heads", config.num_kv_heads},
          {"head_dim", config.head_dim()},
          {"intermediate_size", config.intermediate_size},
          {"max_position_embeddings", config.max_position_embeddings},
          {"rms_norm_eps", config.norm_eps},
          {"rope_theta", config.rope.theta},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", config.dtype == runtime::DType::kBF16 ? "bfloat16" : "float32"}};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// splitmix64: fast, seeded, plenty for random weights.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Whether the checkpoint in `dir` holds exactly the tensors (names and
// shapes) a checkpoint of `config` has: one written by another grove version
// (or cut short) is written again instead of failing the load.
bool holds_the_weights(const std::string& dir, const DecoderConfig& config) {
  try {
    weights::SafetensorsFile file = weights::SafetensorsFile::open(dir + "/model.safetensors");
    const auto expected = serving::llm::checkpoint_weights(config);
    if (file.entries().size() != expected.size()) return false;
    for (const auto& [name, shape] : expected) {
      const weights::SafetensorsEntry* entry = file.find(name);
      if (entry == nullptr || entry->shape != std::vector<int64_t>(shape.begin(), shape.end())) {
        return false;
      }
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

DecoderConfig decode_benchmark_config(const std::string& name, runtime::DType dtype,
                                      int64_t max_position_embeddings) {
  DecoderConfig config;
  config.architecture = serving::llm::Architecture::kLlama;
  config.vocab_size = 32000;
  config.max_position_embeddings = max_position_embeddings;
  config.norm_eps = 1e-5;
  config.eos_token_ids = {2};
  config.dtype = dtype;
  if (name == "1b") {
    config.hidden_size = 2048;
    config.num_layers = 16;
    config.num_heads = 32;
    config.num_kv_heads = 8;
    config.intermediate_size = 8192;
  } else if (name == "small") {
    config.hidden_size = 256;
    config.num_layers = 4;
    config.num_heads = 4;
    config.num_kv_heads = 2;
    config.intermediate_size = 1024;
  } else {
    throw cli::UsageError(str_cat("unknown decode config '", name, "'; use 1b or small"));
  }
  config.head_dimension = config.hidden_size / config.num_heads;
  config.verify();
  return config;
}

bool write_decode_checkpoint(const std::string& dir, const DecoderConfig& config, uint64_t seed) {
  const std::string text = config_json(config).dump(2) + "\n";
  std::filesystem::create_directories(dir);
  if (std::filesystem::exists(dir + "/model.safetensors") &&
      read_file(dir + "/config.json") == text && holds_the_weights(dir, config)) {
    return false;
  }
  // The weights a checkpoint of this config holds, by Hugging Face's names:
  // norms 1, the rest uniform in [-0.02, 0.02) from one SplitMix64 stream in
  // tensor order (norms draw nothing). The stream's n-th draw is a function
  // of n alone, so threads fill spans of it in parallel with the same values
  // a serial pass gives.
  std::vector<weights::TensorToWrite> tensors;
  struct Span {
    size_t tensor;
    int64_t begin, end;  // elements of the tensor
    uint64_t draws_before;
  };
  std::vector<Span> spans;
  constexpr int64_t kSpanElements = int64_t{1} << 22;
  const size_t element = runtime::dtype_size(config.dtype);
  uint64_t draws = 0;
  for (const auto& [name, shape] : serving::llm::checkpoint_weights(config)) {
    weights::TensorToWrite out{.name = name, .dtype = config.dtype};
    int64_t numel = 1;
    for (int64_t extent : shape) {
      out.shape.push_back(extent);
      numel *= extent;
    }
    out.bytes.resize(static_cast<size_t>(numel) * element);
    const bool norm = name.find("norm") != std::string::npos;
    for (int64_t begin = 0; begin < numel; begin += kSpanElements) {
      const int64_t end = std::min(numel, begin + kSpanElements);
      spans.push_back(
          {tensors.size(), begin, end, norm ? ~uint64_t{0} : draws + static_cast<uint64_t>(begin)});
    }
    if (!norm) draws += static_cast<uint64_t>(numel);
    tensors.push_back(std::move(out));
  }
  std::atomic<size_t> next_span{0};
  auto fill = [&] {
    for (size_t i = next_span++; i < spans.size(); i = next_span++) {
      const Span& span = spans[i];
      uint8_t* bytes = tensors[span.tensor].bytes.data();
      // SplitMix64 adds its constant before each draw: after n draws the state is seed + n * it.
      uint64_t random = seed + span.draws_before * 0x9E3779B97F4A7C15ull;
      for (int64_t e = span.begin; e < span.end; ++e) {
        const double value =
            span.draws_before == ~uint64_t{0}
                ? 1.0
                : (static_cast<double>(next_random(random) >> 11) / 9007199254740992.0 - 0.5) *
                      0.04;
        runtime::store_element(bytes + static_cast<size_t>(e) * element, config.dtype, value);
      }
    }
  };
  std::vector<std::thread> workers;
  const unsigned count = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 1; t < count; ++t) workers.emplace_back(fill);
  fill();
  for (std::thread& worker : workers) worker.join();
  weights::write_safetensors(dir + "/model.safetensors", tensors);
  std::ofstream(dir + "/config.json") << text;
  return true;
}

}  // namespace grove::benchmarks
