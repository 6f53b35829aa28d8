// Settings read from environment variables.
#pragma once

#include <optional>
#include <string_view>

namespace grove::runtime {

// The decimal integer in environment variable `name`, or nullopt where it is
// unset or empty. Anything else (trailing text, a value outside [minimum,
// maximum]) is a ConfigError reading "NAME='VALUE'" followed by `refusal`
// (e.g. ": expected a count from 0 to 64").
std::optional<long> integer_from_environment(const char* name, long minimum, long maximum,
                                             std::string_view refusal);

}  // namespace grove::runtime
