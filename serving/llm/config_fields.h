// Reading fields of a Hugging Face config.json (or of a dict inside it) with
// errors that name the file and the key: what decoder_config.cc and
// rope_config.cc share.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace grove::serving::llm {

// config[key] as an integer; grove::Error naming `what` and the key when it
// is absent or not an integer.
int64_t required_int(const nlohmann::json& config, const std::string& key, const std::string& what);
// config[key] as an integer, `fallback` where it is absent or null.
int64_t optional_int(const nlohmann::json& config, const std::string& key, int64_t fallback,
                     const std::string& what);
// config[key] as a number, `fallback` where it is absent or null.
double optional_number(const nlohmann::json& config, const std::string& key, double fallback,
                       const std::string& what);

}  // namespace grove::serving::llm
