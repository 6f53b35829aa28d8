#include "runtime/environment.h"

#include <cstdlib>

#include "runtime/error.h"

namespace grove::runtime {

std::optional<long> integer_from_environment(const char* name, long minimum, long maximum,
                                             std::string_view refusal) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != text && *end == '\0' && value >= minimum && value <= maximum,
                 name, "='", text, "'", refusal);
  return value;
}

}  // namespace grove::runtime
