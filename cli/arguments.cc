#include "cli/arguments.h"

#include <algorithm>
#include <cctype>

#include "runtime/device_context.h"

namespace grove::cli {

int64_t parse_positive_int(const std::string& flag, const std::string& text, int64_t max) {
  return parse_integer(flag, text, 1, max);
}

runtime::Device parse_device_choice(const std::string& text) {
  if (text == "auto") return runtime::default_device();
  std::string type = text.substr(0, text.find(':'));
  if (type == "cuda" || type == "sim") {
    std::string full = text.find(':') == std::string::npos ? text + ":0" : text;
    std::string index = full.substr(full.find(':') + 1);
    if (!index.empty() && std::all_of(index.begin(), index.end(),
                                      [](unsigned char c) { return std::isdigit(c) != 0; })) {
      return runtime::Device::parse(full);
    }
  }
  throw UsageError(str_cat(
      "--device expects auto, cuda or sim (optionally with an index: cuda:1), found '", text, "'"));
}

}  // namespace grove::cli
