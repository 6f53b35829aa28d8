#include "serving/llm/rope_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "serving/llm/config_fields.h"

namespace grove::serving::llm {

namespace {

using nlohmann::json;

// Rotary keys grove reads, by type: any other key of the rotary dict is
// refused, so a setting grove would not apply never passes unseen (a
// "factor" with no type, say).
bool known_key(const std::string& key, RopeType type) {
  for (const char* name :
       {"rope_theta", "rope_type", "type", "attention_factor", "partial_rotary_factor"}) {
    if (key == name) return true;
  }
  if (type != RopeType::kDefault && key == "factor") return true;
  if (type != RopeType::kLlama3) return false;
  for (const char* name :
       {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (key == name) return true;
  }
  return false;
}

double required_number(const json& holder, const std::string& key, const std::string& where,
                       const std::string& type) {
  GROVE_CHECK(holder.contains(key) && !holder[key].is_null(), where, ": rope type \"", type,
              "\" needs \"", key, "\"");
  const double value = optional_number(holder, key, 0, where);
  GROVE_CHECK(std::isfinite(value) && value > 0, where, ": \"", key, "\" must be positive, found ",
              holder[key].dump());
  return value;
}

RopeType type_named(const std::string& name, const std::string& where) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "llama3") return RopeType::kLlama3;
  throw Error(str_cat(where, ": rope type \"", name,
                      "\" is not supported; grove implements the \"default\", \"linear\" and "
                      "\"llama3\" rotary embeddings"));
}

// The dict of rotary settings (Note [Rotary settings in both layouts]), or
// null where the config has none; the name it goes by, for messages.
std::pair<const json*, std::string> rotary_dict(const json& config, const std::string& what) {
  const bool has_parameters =
      config.contains("rope_parameters") && !config["rope_parameters"].is_null();
  const bool has_scaling = config.contains("rope_scaling") && !config["rope_scaling"].is_null();
  if (has_parameters) {
    const json& parameters = config["rope_parameters"];
    GROVE_CHECK(parameters.is_object(), what, ": \"rope_parameters\" must be an object, found ",
                parameters.dump());
    if (has_scaling) {  // both layouts: every setting of the older must be the newer's
      const json& scaling = config["rope_scaling"];
      GROVE_CHECK(scaling.is_object(), what, ": \"rope_scaling\" must be an object or null, found ",
                  scaling.dump());
      for (const auto& [key, value] : scaling.items()) {
        const std::string name = key == "type" ? "rope_type" : key;
        GROVE_CHECK(parameters.contains(name) && parameters[name] == value, what,
                    ": \"rope_scaling\" ", scaling.dump(), " disagrees with \"rope_parameters\" ",
                    parameters.dump(), " on \"", key, "\"; write one of them");
      }
    }
    return {&parameters, what + " rope_parameters"};
  }
  if (has_scaling) {
    const json& scaling = config["rope_scaling"];
    GROVE_CHECK(scaling.is_object(), what, ": \"rope_scaling\" must be an object or null, found ",
                scaling.dump());
    return {&scaling, what + " rope_scaling"};
  }
  return {nullptr, what};
}

}  // namespace

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    default:
      return "default";
  }
}

RopeConfig RopeConfig::parse(const json& config, const std::string& what) {
  RopeConfig rope;
  const auto [dict, where] = rotary_dict(config, what);
  const double top_theta = optional_number(config, "rope_theta", 10000, what);
  rope.theta = top_theta;
  if (dict != nullptr) {
    if (dict->contains("rope_theta") && !(*dict)["rope_theta"].is_null()) {
      rope.theta = optional_number(*dict, "rope_theta", 10000, where);
      GROVE_CHECK(!config.contains("rope_theta") || config["rope_theta"].is_null() ||
                      top_theta == rope.theta,
                  what, ": \"rope_theta\" ", top_theta, " disagrees with ", where, "'s ",
                  rope.theta, "; write one of them");
    }
    std::string name = "default";
    for (const char* key : {"rope_type", "type"}) {
      if (!dict->contains(key) || (*dict)[key].is_null()) continue;
      GROVE_CHECK((*dict)[key].is_string(), where, ": \"", key, "\" must be a string, found ",
                  (*dict)[key].dump());
      name = (*dict)[key].get<std::string>();
      break;
    }
    rope.type = type_named(name, where);
    for (const auto& [key, value] : dict->items()) {
      GROVE_CHECK(known_key(key, rope.type), where, ": key \"", key, "\" (", value.dump(),
                  ") is not a setting of grove's \"", name, "\" rotary embedding");
    }
    const double attention = optional_number(*dict, "attention_factor", 1, where);
    GROVE_CHECK(attention == 1, where, ": attention_factor ", attention,
                " is not supported; grove's rotary tables are unscaled");
    if (rope.type != RopeType::kDefault) {
      rope.factor = required_number(*dict, "factor", where, name);
    }
    if (rope.type == RopeType::kLlama3) {
      rope.low_freq_factor = required_number(*dict, "low_freq_factor", where, name);
      rope.high_freq_factor = required_number(*dict, "high_freq_factor", where, name);
      rope.original_max_position_embeddings =
          required_number(*dict, "original_max_position_embeddings", where, name);
      GROVE_CHECK(rope.high_freq_factor != rope.low_freq_factor, where,
                  ": llama3's high_freq_factor and low_freq_factor must differ");
    }
  }
  GROVE_CHECK(std::isfinite(rope.theta) && rope.theta > 0, what,
              ": rope_theta must be positive, found ", rope.theta);
  for (const json* holder : {&config, dict}) {
    if (holder == nullptr) continue;
    const double partial = optional_number(*holder, "partial_rotary_factor", 1, what);
    GROVE_CHECK(partial == 1, what, ": partial_rotary_factor ", partial,
                " is not supported; grove rotates every dimension of a head");
  }
  return rope;
}

// Note [Rotary settings in both layouts]: each operation in f32, in
// transformers' order (a scalar over a tensor is the tensor's reciprocal
// times the scalar there).
std::vector<float> RopeConfig::inverse_frequencies(int64_t head_dim) const {
  const int64_t half = head_dim / 2;
  std::vector<float> result(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    result[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  const auto f = static_cast<float>(factor);
  if (type == RopeType::kLinear) {
    for (float& value : result) value = value / f;
  } else if (type == RopeType::kLlama3) {
    const double old_length = original_max_position_embeddings;
    const auto low_wavelength = static_cast<float>(old_length / low_freq_factor);
    const auto high_wavelength = static_cast<float>(old_length / high_freq_factor);
    const auto two_pi = static_cast<float>(2 * M_PI);
    const auto spread = static_cast<float>(high_freq_factor - low_freq_factor);
    for (float& value : result) {
      const float wavelength = (1.0f / value) * two_pi;
      const float scaled = wavelength > low_wavelength ? value / f : value;
      const float smooth = ((1.0f / wavelength) * static_cast<float>(old_length) -
                            static_cast<float>(low_freq_factor)) /
                           spread;
      const float blended = (1.0f - smooth) * scaled / f + smooth * scaled;
      const bool medium = !(wavelength < high_wavelength) && !(wavelength > low_wavelength);
      value = medium ? blended : scaled;
    }
  }
  return result;
}

}  // namespace grove::serving::llm
