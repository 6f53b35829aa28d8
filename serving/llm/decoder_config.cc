#include "serving/llm/decoder_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"

namespace grove::serving::llm {

namespace {

using nlohmann::json;

int64_t required_int(const json& config, const std::string& key, const std::string& what) {
  GROVE_CHECK(config.contains(key), what, ": config.json lacks \"", key,
              "\"; write the Hugging Face config of the checkpoint");
  GROVE_CHECK(config[key].is_number_integer(), what, ": \"", key, "\" must be an integer, found ",
              config[key].dump());
  return config[key].get<int64_t>();
}

int64_t optional_int(const json& config, const std::string& key, int64_t fallback,
                     const std::string& what) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  return required_int(config, key, what);
}

double optional_number(const json& config, const std::string& key, double fallback,
                       const std::string& what) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  GROVE_CHECK(config[key].is_number(), what, ": \"", key, "\" must be a number, found ",
              config[key].dump());
  return config[key].get<double>();
}

runtime::DType parse_torch_dtype(const json& config, const std::string& what) {
  if (!config.contains("torch_dtype") || config["torch_dtype"].is_null()) {
    return runtime::DType::kF32;
  }
  std::string name = config["torch_dtype"].get<std::string>();
  if (name == "float32") return runtime::DType::kF32;
  if (name == "bfloat16") return runtime::DType::kBF16;
  throw Error(str_cat(what, ": torch_dtype \"", name,
                      "\" is not supported; grove runs decoders in float32 or bfloat16"));
}

std::optional<int64_t> eos_of(const json& config) {
  if (!config.contains("eos_token_id")) return std::nullopt;
  const json& eos = config["eos_token_id"];
  if (eos.is_number_integer()) return eos.get<int64_t>();
  if (eos.is_array() && !eos.empty() && eos[0].is_number_integer()) return eos[0].get<int64_t>();
  return std::nullopt;
}

DecoderConfig parse_llama(const json& config, const std::string& what) {
  DecoderConfig result;
  result.architecture = Architecture::kLlama;
  result.vocab_size = required_int(config, "vocab_size", what);
  result.hidden_size = required_int(config, "hidden_size", what);
  result.num_layers = required_int(config, "num_hidden_layers", what);
  result.num_heads = required_int(config, "num_attention_heads", what);
  result.num_kv_heads = optional_int(config, "num_key_value_heads", result.num_heads, what);
  result.head_dimension = optional_int(
      config, "head_dim", result.num_heads > 0 ? result.hidden_size / result.num_heads : 0, what);
  result.intermediate_size = required_int(config, "intermediate_size", what);
  result.max_position_embeddings = optional_int(config, "max_position_embeddings", 2048, what);
  result.norm_eps = optional_number(config, "rms_norm_eps", 1e-6, what);
  result.rope_theta = optional_number(config, "rope_theta", 10000, what);
  result.tie_word_embeddings = config.contains("tie_word_embeddings") &&
                               config["tie_word_embeddings"].is_boolean() &&
                               config["tie_word_embeddings"].get<bool>();
  GROVE_CHECK(!config.contains("rope_scaling") || config["rope_scaling"].is_null(), what,
              ": rope_scaling ",
              config.contains("rope_scaling") ? config["rope_scaling"].dump() : "",
              " is not supported; grove implements LLaMA's plain rotary embedding");
  GROVE_CHECK(!config.contains("hidden_act") || config["hidden_act"] == "silu", what,
              ": hidden_act ", config.value("hidden_act", json()).dump(),
              " is not supported; LLaMA's MLP is SwiGLU (\"silu\")");
  GROVE_CHECK(!config.value("attention_bias", false) && !config.value("mlp_bias", false), what,
              ": attention_bias / mlp_bias are not supported; LLaMA's projections have no bias");
  return result;
}

DecoderConfig parse_gpt2(const json& config, const std::string& what) {
  DecoderConfig result;
  result.architecture = Architecture::kGpt2;
  result.vocab_size = required_int(config, "vocab_size", what);
  result.hidden_size = required_int(config, "n_embd", what);
  result.num_layers = required_int(config, "n_layer", what);
  result.num_heads = required_int(config, "n_head", what);
  result.num_kv_heads = result.num_heads;
  result.head_dimension = result.num_heads > 0 ? result.hidden_size / result.num_heads : 0;
  result.intermediate_size = optional_int(config, "n_inner", 4 * result.hidden_size, what);
  result.max_position_embeddings = required_int(config, "n_positions", what);
  result.norm_eps = optional_number(config, "layer_norm_epsilon", 1e-5, what);
  result.tie_word_embeddings = true;
  std::string activation = config.value("activation_function", std::string("gelu_new"));
  GROVE_CHECK(activation == "gelu_new" || activation == "gelu_pytorch_tanh", what,
              ": activation_function \"", activation,
              "\" is not supported; grove's GPT-2 uses the tanh approximation (gelu_new)");
  GROVE_CHECK(!config.value("scale_attn_by_inverse_layer_idx", false) &&
                  !config.value("reorder_and_upcast_attn", false),
              what,
              ": scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported");
  return result;
}

}  // namespace

const char* architecture_name(Architecture architecture) {
  return architecture == Architecture::kLlama ? "llama" : "gpt2";
}

DecoderConfig DecoderConfig::parse(const std::string& json_text, const std::string& what) {
  json config;
  try {
    config = json::parse(json_text);
  } catch (const json::exception& error) {
    throw Error(str_cat(what, ": not valid JSON: ", error.what()));
  }
  GROVE_CHECK(config.is_object(), what, ": config.json must hold a JSON object");
  std::string model_type = config.value("model_type", std::string());
  DecoderConfig result;
  if (model_type == "llama") {
    result = parse_llama(config, what);
  } else if (model_type == "gpt2") {
    result = parse_gpt2(config, what);
  } else {
    throw Error(str_cat(what, ": model_type \"", model_type,
                        "\" is not supported; grove decodes \"llama\" and \"gpt2\" checkpoints"));
  }
  result.eos_token_id = eos_of(config);
  result.dtype = parse_torch_dtype(config, what);
  result.verify();
  return result;
}

DecoderConfig DecoderConfig::load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream file(path);
  GROVE_CHECK(file.good(), "cannot read ", path,
              "; a model directory holds config.json and model.safetensors");
  std::stringstream text;
  text << file.rdbuf();
  return parse(text.str(), path);
}

void DecoderConfig::verify() const {
  const char* arch = architecture_name(architecture);
  GROVE_CHECK(vocab_size > 0 && hidden_size > 0 && num_layers > 0 && num_heads > 0 &&
                  num_kv_heads > 0 && head_dimension > 0 && intermediate_size > 0 &&
                  max_position_embeddings > 0,
              arch, " config: every size must be positive (vocab ", vocab_size, ", hidden ",
              hidden_size, ", layers ", num_layers, ", heads ", num_heads, ", kv heads ",
              num_kv_heads, ", head_dim ", head_dimension, ", intermediate ", intermediate_size,
              ", positions ", max_position_embeddings, ")");
  GROVE_CHECK(num_heads % num_kv_heads == 0, arch, " config: ", num_heads,
              " attention heads are not a multiple of ", num_kv_heads, " key/value heads");
  GROVE_CHECK(head_dimension % 2 == 0, arch, " config: head_dim ", head_dimension,
              " must be even for the rotary embedding");
  GROVE_CHECK(architecture != Architecture::kGpt2 || num_heads * head_dimension == hidden_size,
              arch, " config: n_embd ", hidden_size, " is not a multiple of n_head ", num_heads);
}

}  // namespace grove::serving::llm
