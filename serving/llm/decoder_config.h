// DecoderConfig is the shape of a decoder-only language model (LLaMA or GPT-2
// architecture) as Hugging Face's config.json describes it, plus the dtype the
// model runs in. It is all the program builders need to know about a model.
//
//   DecoderConfig config = DecoderConfig::load("models/tiny-llama");  // reads config.json
//   config.head_dim();  // hidden_size / num_heads unless config.json says head_dim
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "serving/llm/rope_config.h"

namespace grove::serving::llm {

// EOS tokens a row's stop test compares a token with (decode_kernels_layout.h).
inline constexpr size_t kMaxEosTokens = 8;

enum class Architecture : uint8_t {
  kLlama,  // RMSNorm, rotary embedding, grouped-query attention, SwiGLU MLP (and its family)
  kGpt2,   // LayerNorm, learned positions, multi-head attention, GELU MLP, Conv1D weights
};

const char* architecture_name(Architecture architecture);  // "llama", "gpt2"

struct DecoderConfig {
  Architecture architecture = Architecture::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads for GPT-2
  int64_t head_dimension = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-5;
  RopeConfig rope;  // LLaMA only
  // Note [LLaMA's family] (decoder_config.cc): the attention window (unset:
  // every position), biases on q, k and v (Qwen2), RMSNorm of each query and
  // key head (Qwen3).
  std::optional<int64_t> sliding_window;
  bool qkv_bias = false;
  bool qk_norm = false;
  bool tie_word_embeddings = false;  // GPT-2 always ties lm_head to wte
  // Note [Every EOS token stops a row]: generation_config.json's eos_token_id
  // where the directory has one, else config.json's; at most kMaxEosTokens.
  std::vector<int64_t> eos_token_ids;
  runtime::DType dtype = runtime::DType::kF32;

  int64_t head_dim() const { return head_dimension; }
  int64_t query_groups() const { return num_heads / num_kv_heads; }

  // Parses config.json text (`what` names it in messages), in the layout of
  // transformers 4 or 5 (Note [Rotary settings in both layouts]: "torch_dtype"
  // or "dtype"). Throws grove::Error naming the key that is missing, mistyped
  // or unsupported (a rotary type grove lacks, an activation other than
  // GPT-2's gelu_new, a dtype other than float32/bfloat16).
  static DecoderConfig parse(const std::string& json_text, const std::string& what);
  // parse() of MODEL_DIR/config.json; the EOS tokens of
  // MODEL_DIR/generation_config.json where it exists and names them. With
  // `dtype`, the model runs in it whatever config.json's dtype is (a float16
  // checkpoint in float32 or bfloat16; its weights are converted on load).
  static DecoderConfig load(const std::string& model_dir,
                            std::optional<runtime::DType> dtype = std::nullopt);
  // Throws grove::Error when the numbers do not fit together (heads divide
  // hidden, kv heads divide heads, positive sizes).
  void verify() const;
};

}  // namespace grove::serving::llm
