#include "cudagraph_trees/config.h"

#include <cstdlib>
#include <string_view>

#include "cudagraph_trees/batch_buckets.h"

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
  GROVE_CHECK_AS(ConfigError,
                 end != value && *end == '\0' && parsed >= minimum && parsed <= 1 << 30, variable,
                 "='", value, "': expected an integer >= ", minimum);
  return static_cast<int>(parsed);
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

}  // namespace

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
  // Empty: BucketedFunction then needs its own BucketSpec::buckets.
  if (!batch_buckets.empty()) {
    BatchBuckets checked(batch_buckets, "TreeConfig.batch_buckets");  // throws ConfigError
  }
}

}  // namespace grove::cudagraph_trees
