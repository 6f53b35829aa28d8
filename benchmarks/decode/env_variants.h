// --variants of the decode benchmarks: environment settings a run takes while
// it records (decode: one DecodeLoop per variant; decode load: one load per
// variant), so one process times each setting a launcher reads at each launch.
//
//   for (const EnvVariant& variant : parse_variants("GROVE_A=0;GROVE_A=1,GROVE_B=2")) {
//     VariantEnvironment environment(variant);  // set until it goes out of scope
//     ...
//   }
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace grove::benchmarks {

// GROVE_NAME=VALUE settings, set together.
using EnvVariant = std::vector<std::pair<std::string, std::string>>;

// Variants split by ';', a variant's settings by ','; throws UsageError for
// anything else (a setting not GROVE_NAME=VALUE, an empty variant).
std::vector<EnvVariant> parse_variants(const std::string& text);

// "GROVE_A=0,GROVE_B=2"; "defaults" for no setting.
std::string variant_name(const EnvVariant& variant);

// Sets a variant's variables for the life of the object, then restores them.
class VariantEnvironment {
 public:
  explicit VariantEnvironment(const EnvVariant& variant);
  ~VariantEnvironment();
  VariantEnvironment(const VariantEnvironment&) = delete;
  VariantEnvironment& operator=(const VariantEnvironment&) = delete;

 private:
  struct Saved {
    std::string key;
    bool was_set;
    std::string value;
  };
  std::vector<Saved> saved_;
};

}  // namespace grove::benchmarks
