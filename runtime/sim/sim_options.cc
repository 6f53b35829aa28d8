// SimOptions from the environment (runtime/sim/sim_platform.h).
#include <cstdlib>
#include <string>

#include "runtime/error.h"
#include "runtime/sim/sim_platform.h"

namespace grove::runtime {
namespace {

bool environment_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return false;
  std::string text(value);
  GROVE_CHECK_AS(ConfigError, text == "0" || text == "1", name, "='", text, "': expected 0 or 1");
  return text == "1";
}

}  // namespace

SimOptions SimOptions::from_environment() {
  SimOptions options;
  options.async = environment_flag("GROVE_SIM_ASYNC");
  if (const char* check = std::getenv("GROVE_SIM_CHECK"); check != nullptr && *check != '\0') {
    std::string mode(check);
    GROVE_CHECK_AS(ConfigError, mode == "off" || mode == "record" || mode == "throw",
                   "GROVE_SIM_CHECK='", mode, "': expected off, record or throw");
    options.hazards = mode == "throw"    ? sim::HazardMode::kThrow
                      : mode == "record" ? sim::HazardMode::kRecord
                                         : sim::HazardMode::kOff;
  }
  return options;
}

}  // namespace grove::runtime
