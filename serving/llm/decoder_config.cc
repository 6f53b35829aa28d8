#include "serving/llm/decoder_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"
#include "serving/llm/config_fields.h"

namespace grove::serving::llm {

namespace {

using nlohmann::json;

// transformers 4 writes "torch_dtype", transformers 5 "dtype".
runtime::DType parse_torch_dtype(const json& config, const std::string& what) {
  std::string key;
  for (const char* name : {"dtype", "torch_dtype"}) {
    if (!config.contains(name) || config[name].is_null()) continue;
    GROVE_CHECK(config[name].is_string(), what, ": \"", name, "\" must be a string, found ",
                config[name].dump());
    GROVE_CHECK(key.empty() || config[name] == config[key], what, ": \"dtype\" ",
                config["dtype"].dump(), " disagrees with \"torch_dtype\" ",
                config["torch_dtype"].dump(), "; write one of them");
    key = name;
  }
  if (key.empty()) return runtime::DType::kF32;
  std::string name = config[key].get<std::string>();
  if (name == "float32") return runtime::DType::kF32;
  if (name == "bfloat16") return runtime::DType::kBF16;
  throw Error(str_cat(what, ": ", key, " \"", name,
                      "\" is not supported; grove runs decoders in float32 or bfloat16 (--dtype "
                      "float32 or bfloat16 runs this checkpoint converted)"));
}

// Note [Every EOS token stops a row]
// A checkpoint may name several EOS tokens (LLaMA 3.1 Instruct's
// [128001, 128008, 128009]: end of text, of a tool call, of a turn), and
// Hugging Face's generate stops at any of them, taking them from
// generation_config.json where the directory has one. grove kept only the
// first, so a chat model ran past its end of turn until max_tokens. Every one
// is kept now, up to kMaxEosTokens (more is refused by name), and each decode
// path's stop test compares the token with all of them: the host's
// (Generator::append), the sampling kernel's and its host function's
// (decode_layout::is_eos). Tests: DecoderConfig.EosTokensAreAllKeptFromEitherFile
// (checkpoint_test.cc), Generator.AnyOfSeveralEosTokensStopsARequest
// (generator_test.cc), DecodeLoopTest.AnyOfSeveralEosTokensStopsTheRow
// (decode_loop_test.cc, cuda and sim).
std::vector<int64_t> eos_of(const json& config, const std::string& what) {
  if (!config.contains("eos_token_id") || config["eos_token_id"].is_null()) return {};
  const json& eos = config["eos_token_id"];
  std::vector<int64_t> tokens;
  for (const json& token : eos.is_array() ? eos : json::array({eos})) {
    GROVE_CHECK(token.is_number_integer() && token.get<int64_t>() >= 0, what,
                ": eos_token_id must be a token id or a list of them, found ", eos.dump());
    tokens.push_back(token.get<int64_t>());
  }
  GROVE_CHECK(tokens.size() <= kMaxEosTokens, what, ": eos_token_id names ", tokens.size(),
              " tokens; grove stops at up to ", kMaxEosTokens);
  return tokens;
}

json read_json(const std::string& path) {
  std::ifstream file(path);
  GROVE_CHECK(file.good(), "cannot read ", path,
              "; a model directory holds config.json and model.safetensors");
  std::stringstream text;
  text << file.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& error) {
    throw Error(str_cat(path, ": not valid JSON: ", error.what()));
  }
}

// Note [LLaMA's family]
// Mistral, Qwen2 and Qwen3 checkpoints are LLaMA ones (the same modules, tensor
// names, RMSNorm, rotary embedding, grouped-query attention and SwiGLU MLP)
// but for three things, each read from config.json:
//  - a sliding attention window (Mistral's sliding_window, null from Mistral
//    7B v0.2 on; Qwen's where use_sliding_window or a "sliding_attention"
//    layer type says so). Within the window it sees every position, so grove
//    decodes these wherever its cache holds no more positions than the window
//    and DecoderState refuses a longer max_seq_len by name, never attending
//    past the window unasked;
//  - biases on the q, k and v projections (Qwen2 always; Qwen3 where
//    attention_bias says so, which also puts one on o_proj: refused), added to
//    the fused projection (Note [Fused projection weights]);
//  - Qwen3's RMSNorm of each query and key head (self_attn.q_norm / k_norm)
//    before the rotary embedding.
// Anything else a family adds is refused by name (bias on an MLP or o_proj).
// Tests: DecoderConfig.TheFamilyIsReadFromConfigJson (checkpoint_test.cc),
// generate_reference_test.py's Mistral, Qwen2 and Qwen3 cases (sim, against
// the reference decoders), gpu_transformers_test.py's cases against
// transformers' MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM.
std::optional<int64_t> attention_window(const json& config, const std::string& model_type,
                                        const std::string& what) {
  bool windowed = model_type == "mistral";
  if (config.contains("use_sliding_window") && config["use_sliding_window"].is_boolean()) {
    windowed = windowed || config["use_sliding_window"].get<bool>();
  }
  if (config.contains("layer_types") && config["layer_types"].is_array()) {
    for (const json& type : config["layer_types"]) {
      GROVE_CHECK(type == "full_attention" || type == "sliding_attention", what, ": layer type ",
                  type.dump(), " is not supported; grove's layers are full or sliding attention");
      windowed = windowed || type == "sliding_attention";
    }
  }
  if (!windowed || !config.contains("sliding_window") || config["sliding_window"].is_null()) {
    return std::nullopt;
  }
  const int64_t window = required_int(config, "sliding_window", what);
  GROVE_CHECK(window > 0, what, ": sliding_window must be positive, found ", window);
  return window;
}

DecoderConfig parse_llama(const json& config, const std::string& model_type,
                          const std::string& what) {
  DecoderConfig result;
  result.architecture = Architecture::kLlama;
  result.vocab_size = required_int(config, "vocab_size", what);
  result.hidden_size = required_int(config, "hidden_size", what);
  result.num_layers = required_int(config, "num_hidden_layers", what);
  result.num_heads = required_int(config, "num_attention_heads", what);
  result.num_kv_heads = optional_int(config, "num_key_value_heads", result.num_heads, what);
  // Where config.json leaves head_dim out, transformers' own default: 128 for
  // Qwen3 (its config class's), hidden / heads for the others.
  const int64_t default_head_dim = model_type == "qwen3"  ? 128
                                   : result.num_heads > 0 ? result.hidden_size / result.num_heads
                                                          : 0;
  result.head_dimension = optional_int(config, "head_dim", default_head_dim, what);
  result.intermediate_size = required_int(config, "intermediate_size", what);
  result.max_position_embeddings = optional_int(config, "max_position_embeddings", 2048, what);
  result.norm_eps = optional_number(config, "rms_norm_eps", 1e-6, what);
  result.rope = RopeConfig::parse(config, what);
  result.tie_word_embeddings = config.contains("tie_word_embeddings") &&
                               config["tie_word_embeddings"].is_boolean() &&
                               config["tie_word_embeddings"].get<bool>();
  GROVE_CHECK(!config.contains("hidden_act") || config["hidden_act"] == "silu", what,
              ": hidden_act ", config.value("hidden_act", json()).dump(),
              " is not supported; LLaMA's MLP is SwiGLU (\"silu\")");
  // Note [LLaMA's family]
  const bool attention_bias = config.value("attention_bias", false);
  GROVE_CHECK(!config.value("mlp_bias", false) && (model_type == "qwen2" || !attention_bias), what,
              ": attention_bias / mlp_bias are not supported for ", model_type, "; grove's ",
              model_type, " projections have no bias",
              model_type == "qwen2" ? " but q, k and v" : "");
  result.qkv_bias = model_type == "qwen2";
  result.qk_norm = model_type == "qwen3";
  result.sliding_window = attention_window(config, model_type, what);
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

DecoderConfig parse_object(const json& config, const std::string& what) {
  GROVE_CHECK(config.is_object(), what, ": config.json must hold a JSON object");
  std::string model_type = config.value("model_type", std::string());
  DecoderConfig result;
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" ||
      model_type == "qwen3") {
    result = parse_llama(config, model_type, what);
  } else if (model_type == "gpt2") {
    result = parse_gpt2(config, what);
  } else {
    throw Error(str_cat(what, ": model_type \"", model_type,
                        "\" is not supported; grove decodes \"llama\", \"mistral\", \"qwen2\", "
                        "\"qwen3\" and \"gpt2\" checkpoints"));
  }
  result.eos_token_ids = eos_of(config, what);
  result.dtype = parse_torch_dtype(config, what);
  result.verify();
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
  return parse_object(config, what);
}

DecoderConfig DecoderConfig::load(const std::string& model_dir,
                                  std::optional<runtime::DType> dtype) {
  const std::string path = model_dir + "/config.json";
  json fields = read_json(path);
  if (dtype && fields.is_object()) {  // the caller's dtype replaces the checkpoint's
    GROVE_CHECK(*dtype == runtime::DType::kF32 || *dtype == runtime::DType::kBF16,
                "grove runs decoders in float32 or bfloat16");
    fields.erase("torch_dtype");
    fields["dtype"] = *dtype == runtime::DType::kF32 ? "float32" : "bfloat16";
  }
  DecoderConfig config = parse_object(fields, path);
  // Note [Every EOS token stops a row]: generate's own source of them.
  const std::string generation_path = model_dir + "/generation_config.json";
  if (std::ifstream(generation_path).good()) {
    const json generation = read_json(generation_path);
    GROVE_CHECK(generation.is_object(), generation_path, ": must hold a JSON object");
    if (generation.contains("eos_token_id") && !generation["eos_token_id"].is_null()) {
      config.eos_token_ids = eos_of(generation, generation_path);
    }
  }
  return config;
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
