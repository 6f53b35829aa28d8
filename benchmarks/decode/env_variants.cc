#include "benchmarks/decode/env_variants.h"

#include <algorithm>
#include <cstdlib>

#include "benchmarks/common/flags.h"
#include "runtime/error.h"

namespace grove::benchmarks {

std::vector<EnvVariant> parse_variants(const std::string& text) {
  std::vector<EnvVariant> variants;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t end = std::min(text.find(';', start), text.size());
    EnvVariant& variant = variants.emplace_back();
    size_t pair_start = start;
    while (pair_start < end) {
      const size_t pair_end = std::min(text.find(',', pair_start), end);
      const std::string pair = text.substr(pair_start, pair_end - pair_start);
      const size_t equals = pair.find('=');
      if (equals == std::string::npos || equals == 0 || pair.rfind("GROVE_", 0) != 0) {
        throw UsageError(str_cat("--variants: '", pair,
                                 "' is not GROVE_NAME=VALUE (variants split "
                                 "by ';', a variant's settings by ',')"));
      }
      variant.emplace_back(pair.substr(0, equals), pair.substr(equals + 1));
      pair_start = pair_end + 1;
    }
    if (variant.empty()) throw UsageError("--variants: an empty variant in '" + text + "'");
    start = end + 1;
  }
  return variants;
}

std::string variant_name(const EnvVariant& variant) {
  std::string name;
  for (const auto& [key, value] : variant) name += (name.empty() ? "" : ",") + key + "=" + value;
  return name.empty() ? "defaults" : name;
}

VariantEnvironment::VariantEnvironment(const EnvVariant& variant) {
  for (const auto& [key, value] : variant) {
    const char* before = std::getenv(key.c_str());
    saved_.push_back({key, before != nullptr, before != nullptr ? before : ""});
    ::setenv(key.c_str(), value.c_str(), 1);
  }
}

VariantEnvironment::~VariantEnvironment() {
  for (const Saved& saved : saved_) {
    if (saved.was_set) {
      ::setenv(saved.key.c_str(), saved.value.c_str(), 1);
    } else {
      ::unsetenv(saved.key.c_str());
    }
  }
}

}  // namespace grove::benchmarks
