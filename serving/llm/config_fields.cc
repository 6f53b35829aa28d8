#include "serving/llm/config_fields.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace grove::serving::llm {

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

}  // namespace grove::serving::llm
