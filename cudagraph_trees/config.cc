#include "cudagraph_trees/config.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "runtime/batch_buckets.h"
#include "runtime/environment.h"

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
  const std::optional<long> value = runtime::integer_from_environment(
      variable, minimum, 1 << 30, str_cat(": expected an integer >= ", minimum));
  return value ? static_cast<int>(*value) : fallback;
}

std::vector<int64_t> read_sizes(const char* variable, std::vector<int64_t> fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  std::vector<int64_t> sizes;
  const char* at = value;
  while (*at != '\0') {
    char* end = nullptr;
    long long parsed = std::strtoll(at, &end, 10);
    GROVE_CHECK_AS(ConfigError, end != at && parsed >= 1 && (*end == ',' || *end == '\0'), variable,
                   "='", value,
                   "': expected a comma-separated list of positive integers, e.g. 1,2,4,8");
    sizes.push_back(parsed);
    at = *end == ',' ? end + 1 : end;
  }
  return sizes;
}

std::vector<std::string> read_names(const char* variable, std::vector<std::string> fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  std::vector<std::string> names;
  std::string_view text(value);
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view name = text.substr(0, comma);
    GROVE_CHECK_AS(ConfigError, !name.empty(), variable, "='", value,
                   "': expected comma-separated function names (a trailing '*' matches a "
                   "prefix), with no empty entry");
    names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    GROVE_CHECK_AS(ConfigError, !text.empty(), variable, "='", value,
                   "': a trailing comma leaves an empty entry");
  }
  return names;
}

size_t read_bytes(const char* variable, size_t fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  GROVE_CHECK_AS(
      ConfigError,
      end != value && *end == '\0' && errno == 0 && value[0] != '-' && parsed <= (1ull << 50),
      variable, "='", value, "': expected a number of bytes from 0 to 2^50");
  return static_cast<size_t>(parsed);
}

}  // namespace

const char* managed_input_policy_name(ManagedInputPolicy policy) {
  switch (policy) {
    case ManagedInputPolicy::kCopy:
      return "copy";
    case ManagedInputPolicy::kEager:
      return "eager";
  }
  return "?";
}

const std::string* TreeConfig::skip_entry_for(const std::string& function_name) const {
  for (const std::string& entry : skip_functions) {
    if (!entry.empty() && entry.back() == '*') {
      if (std::string_view(function_name)
              .starts_with(std::string_view(entry).substr(0, entry.size() - 1))) {
        return &entry;
      }
    } else if (entry == function_name) {
      return &entry;
    }
  }
  return nullptr;
}

const char* mutation_policy_name(MutationPolicy policy) {
  switch (policy) {
    case MutationPolicy::kCopyBack:
      return "copy-back";
    case MutationPolicy::kEager:
      return "eager";
  }
  return "?";
}

TreeConfig TreeConfig::from_environment() {
  TreeConfig config;
  config.strict = read_bool("GROVE_CUDAGRAPHS_STRICT", config.strict);
  config.rerecord_limit = read_int("GROVE_CUDAGRAPHS_RERECORD_LIMIT", config.rerecord_limit, 0);
  config.managed_input_move_limit =
      read_int("GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT", config.managed_input_move_limit, 1);
  config.shape_warn_limit =
      read_int("GROVE_CUDAGRAPHS_SHAPE_WARN_LIMIT", config.shape_warn_limit, 1);
  if (const char* policy = std::getenv("GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY");
      policy != nullptr && *policy != '\0') {
    std::string_view text(policy);
    if (text == "copy") {
      config.managed_input_policy = ManagedInputPolicy::kCopy;
    } else if (text == "eager") {
      config.managed_input_policy = ManagedInputPolicy::kEager;
    } else {
      throw ConfigError(
          str_cat("GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY='", text, "': expected copy or eager"));
    }
  }
  config.skip_functions = read_names("GROVE_CUDAGRAPHS_SKIP", config.skip_functions);
  config.initial_pool_bytes =
      read_bytes("GROVE_CUDAGRAPHS_INITIAL_POOL_BYTES", config.initial_pool_bytes);
  if (const char* policy = std::getenv("GROVE_CUDAGRAPHS_MUTATION_POLICY");
      policy != nullptr && *policy != '\0') {
    std::string_view text(policy);
    if (text == "copy-back" || text == "copyback") {
      config.mutation_policy = MutationPolicy::kCopyBack;
    } else if (text == "eager") {
      config.mutation_policy = MutationPolicy::kEager;
    } else {
      throw ConfigError(
          str_cat("GROVE_CUDAGRAPHS_MUTATION_POLICY='", text, "': expected copy-back or eager"));
    }
  }
  config.zero_copy_inputs = read_bool("GROVE_CUDAGRAPHS_ZERO_COPY", config.zero_copy_inputs);
  config.clone_kept_outputs =
      read_bool("GROVE_CUDAGRAPHS_CLONE_KEPT_OUTPUTS", config.clone_kept_outputs);
  config.graph_input_copies =
      read_bool("GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES", config.graph_input_copies);
  config.min_segment_kernels =
      read_int("GROVE_CUDAGRAPHS_MIN_SEGMENT_KERNELS", config.min_segment_kernels, 0);
  config.batch_buckets = read_sizes("GROVE_CUDAGRAPHS_BATCH_BUCKETS", config.batch_buckets);
  config.validate();
  return config;
}

void TreeConfig::validate() const {
  GROVE_CHECK_AS(ConfigError, rerecord_limit >= 0, "TreeConfig.rerecord_limit = ", rerecord_limit,
                 ": expected >= 0");
  GROVE_CHECK_AS(ConfigError, managed_input_move_limit >= 1,
                 "TreeConfig.managed_input_move_limit = ", managed_input_move_limit,
                 ": expected >= 1");
  GROVE_CHECK_AS(ConfigError, shape_warn_limit >= 1,
                 "TreeConfig.shape_warn_limit = ", shape_warn_limit, ": expected >= 1");
  GROVE_CHECK_AS(ConfigError, min_segment_kernels >= 0,
                 "TreeConfig.min_segment_kernels = ", min_segment_kernels, ": expected >= 0");
  for (const std::string& entry : skip_functions) {
    GROVE_CHECK_AS(ConfigError, !entry.empty(),
                   "TreeConfig.skip_functions has an empty entry; name functions, or prefixes "
                   "ending in '*'");
  }
  // Empty: BucketedFunction then needs its own BucketSpec::buckets.
  if (!batch_buckets.empty()) {
    runtime::BatchBuckets checked(batch_buckets, "TreeConfig.batch_buckets");  // throws ConfigError
  }
}

}  // namespace grove::cudagraph_trees
