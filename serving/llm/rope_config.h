// The rotary embedding of a LLaMA-architecture checkpoint as its config.json
// states it, in either layout Hugging Face writes, and the inverse
// frequencies it gives (the rotary tables' angles are position x inverse
// frequency).
//
//   RopeConfig rope = RopeConfig::parse(config_json, "config.json");
//   std::vector<float> inv_freq = rope.inverse_frequencies(64);  // head_dim / 2 of them
//
// Note [Rotary settings in both layouts]
// transformers 4.x writes "rope_theta" and "rope_scaling" (null, or a dict
// with "rope_type", or the older "type", and the type's numbers) at the top
// level of config.json; transformers 5 writes one "rope_parameters" dict
// holding "rope_theta", "rope_type" and the numbers. grove read only the
// first layout: a checkpoint saved by transformers 5 with a theta other than
// 10000 (LLaMA 3's 500000) decoded with the wrong angles and no error, and
// its "llama3" scaling went unseen. Both layouts are read now; where
// "rope_parameters" is present it is the checkpoint's statement (a config
// that also carries top-level keys that disagree with it is refused by name).
// Types: "default", "linear" (the inverse frequencies over the factor) and
// "llama3" (LLaMA 3.1's: long wavelengths over the factor, short ones kept,
// those between blended), each computed in f32 in the order transformers
// computes it, so the tables equal its own. "dynamic", "yarn", "longrope" and
// anything else, an attention factor other than 1 and a partial rotary factor
// other than 1 are refused by name, never ignored.
// Tests: RopeConfig.* (tests/serving/llm/rope_config_test.cc) and, against
// transformers' own LlamaForCausalLM from checkpoints it saved,
// tests/serving/llm/gpu_transformers_test.py's saved-by-transformers cases.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace grove::serving::llm {

enum class RopeType : uint8_t { kDefault, kLinear, kLlama3 };

const char* rope_type_name(RopeType type);  // "default", "linear", "llama3"

struct RopeConfig {
  double theta = 10000;
  RopeType type = RopeType::kDefault;
  double factor = 1;                            // linear, llama3
  double low_freq_factor = 1;                   // llama3
  double high_freq_factor = 4;                  // llama3
  double original_max_position_embeddings = 0;  // llama3

  // The rotary settings of a parsed config.json object (`what` names it in
  // messages). Throws grove::Error naming the key that is mistyped or the
  // type that grove does not implement.
  static RopeConfig parse(const nlohmann::json& config, const std::string& what);

  // head_dim / 2 inverse frequencies, f32 as transformers computes them.
  std::vector<float> inverse_frequencies(int64_t head_dim) const;
};

}  // namespace grove::serving::llm
