#include "benchmarks/common/flags.h"

#include <algorithm>
#include <iostream>

#include "runtime/device_context.h"

namespace grove::benchmarks {
namespace {

std::string known_flags(const std::vector<FlagSpec>& known) {
  std::string names = "--help";
  for (const FlagSpec& flag : known) names += ", " + flag.name;
  return names;
}

}  // namespace

std::string FlagValues::text(const std::string& name, const std::string& fallback) const {
  auto found = values_.find(name);
  return found == values_.end() ? fallback : found->second;
}

int64_t FlagValues::integer(const std::string& name, int64_t fallback, int64_t minimum,
                            int64_t maximum) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(found->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != found->second.size() || value < minimum || value > maximum) {
    throw UsageError(str_cat(program_, ": ", name, " expects an integer in [", minimum, ", ",
                             maximum, "], found '", found->second, "'"));
  }
  return value;
}

double FlagValues::positive_number(const std::string& name, double fallback) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(found->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != found->second.size() || !(value > 0)) {
    throw UsageError(
        str_cat(program_, ": ", name, " expects a positive number, found '", found->second, "'"));
  }
  return value;
}

std::vector<std::string> FlagValues::list(const std::string& name,
                                          const std::vector<std::string>& fallback) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= found->second.size()) {
    size_t comma = found->second.find(',', start);
    if (comma == std::string::npos) comma = found->second.size();
    std::string item = found->second.substr(start, comma - start);
    if (item.empty()) {
      throw UsageError(str_cat(program_, ": ", name,
                               " expects a comma-separated list without empty items, found '",
                               found->second, "'"));
    }
    items.push_back(item);
    start = comma + 1;
  }
  return items;
}

FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      values["--help"] = "";
      continue;
    }
    bool is_known = std::any_of(known.begin(), known.end(),
                                [&](const FlagSpec& spec) { return spec.name == flag; });
    if (!is_known) {
      throw UsageError(
          str_cat(program, ": unknown flag '", flag, "'; known flags: ", known_flags(known)));
    }
    if (i + 1 >= argc) {
      throw UsageError(str_cat(program, ": flag ", flag, " needs a value"));
    }
    values[flag] = argv[++i];
  }
  return FlagValues(program, std::move(values));
}

std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known) {
  std::string text = summary + "\n\nusage: " + program;
  for (const FlagSpec& flag : known) text += " [" + flag.name + " " + flag.value + "]";
  text += "\n\n";
  for (const FlagSpec& flag : known) {
    std::string left = "  " + flag.name + " " + flag.value;
    left.resize(std::max<size_t>(left.size() + 2, 26), ' ');
    text += left + flag.help + "\n";
  }
  return text;
}

runtime::Device resolve_device(const std::string& flag) {
  runtime::Device device =
      flag == "auto" ? runtime::default_device() : runtime::Device::parse(flag);
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(), "--device ", flag,
                 ": these benchmarks need a device with streams and graphs; use cuda, sim or auto");
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "--device ", flag, ": ",
                 device.str(), " is not available on this machine; use --device auto or sim");
  return device;
}

int benchmark_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << error.what() << "\n(run with --help for the flags)" << std::endl;
    return 2;
  } catch (const Error& error) {
    std::cerr << program << ": " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace grove::benchmarks
