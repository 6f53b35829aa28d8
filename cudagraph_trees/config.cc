#include "cudagraph_trees/config.h"

#include <cstdlib>
#include <string_view>

namespace grove::cudagraph_trees {
namespace {

bool read_bool(const char* variable, bool fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  std::string_view text(value);
  if (text == "1" || text == "true" || text == "on") return true;
  if (text == "0" || text == "false" || text == "off") return false;
  throw ConfigError(str_cat(variable, "='", text, "': expected 1/0, true/false or on/off"));
}

int read_int(const char* variable, int fallback, int minimum) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0' && parsed >= minimum && parsed <= 1 << 30,
                 variable, "='", value, "': expected an integer >= ", minimum);
  return static_cast<int>(parsed);
}

}  // namespace

TreeConfig TreeConfig::from_environment() {
  TreeConfig config;
  config.strict = read_bool("GROVE_CUDAGRAPHS_STRICT", config.strict);
  config.rerecord_limit = read_int("GROVE_CUDAGRAPHS_RERECORD_LIMIT", config.rerecord_limit, 0);
  config.managed_input_move_limit =
      read_int("GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT", config.managed_input_move_limit, 1);
  config.shape_warn_limit =
      read_int("GROVE_CUDAGRAPHS_SHAPE_WARN_LIMIT", config.shape_warn_limit, 1);
  return config;
}

void TreeConfig::validate() const {
  GROVE_CHECK_AS(ConfigError, rerecord_limit >= 0, "TreeConfig.rerecord_limit = ", rerecord_limit,
                 ": expected >= 0");
  GROVE_CHECK_AS(ConfigError, managed_input_move_limit >= 1,
                 "TreeConfig.managed_input_move_limit = ", managed_input_move_limit,
                 ": expected >= 1");
  GROVE_CHECK_AS(ConfigError, shape_warn_limit >= 1, "TreeConfig.shape_warn_limit = ",
                 shape_warn_limit, ": expected >= 1");
}

}  // namespace grove::cudagraph_trees
