#include "cli/arguments.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "runtime/device_context.h"

namespace grove::cli {
namespace {

const FlagSpec* find_flag(const CommandSpec& command, const std::string& name) {
  for (const FlagSpec& flag : command.flags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

std::string flag_list(const CommandSpec& command) {
  std::string names;
  for (const FlagSpec& flag : command.flags) names += (names.empty() ? "" : ", ") + flag.name;
  return names.empty() ? "none" : names;
}

}  // namespace

std::string ParsedArgs::value(const std::string& flag, const std::string& fallback) const {
  auto found = values_.find(flag);
  return found == values_.end() ? fallback : found->second;
}

ParsedArgs parse_flags(const CommandSpec& command, const std::vector<std::string>& args) {
  ParsedArgs parsed;
  const std::string where = command.name + ": ";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help_requested_ = true;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      size_t equals = arg.find('=');
      std::string name = arg.substr(0, equals);
      const FlagSpec* flag = find_flag(command, name);
      if (flag == nullptr) {
        throw UsageError(str_cat(where, "unknown option '", name, "'; options of '", command.name,
                                 "': ", flag_list(command), " (see grove ", command.name,
                                 " --help)"));
      }
      if (parsed.values_.count(name) != 0) {
        throw UsageError(str_cat(where, "option ", name, " is given twice; give it once"));
      }
      std::string value;
      if (flag->takes_value()) {
        if (equals != std::string::npos) {
          value = arg.substr(equals + 1);
        } else if (i + 1 < args.size()) {
          value = args[++i];
        } else {
          throw UsageError(str_cat(where, "option ", name, " needs a value (", name, " ",
                                   flag->value_name, ")"));
        }
        if (value.empty()) {
          throw UsageError(
              str_cat(where, "option ", name, " has an empty value; expected ", flag->value_name));
        }
      } else if (equals != std::string::npos) {
        throw UsageError(str_cat(where, "option ", name, " is a switch and takes no value"));
      }
      parsed.values_[name] = value;
      continue;
    }
    if (command.positional.empty()) {
      throw UsageError(str_cat(where, "unexpected argument '", arg, "'; '", command.name,
                               "' takes no positional arguments"));
    }
    if (!parsed.positional_.empty()) {
      throw UsageError(str_cat(where, "unexpected second argument '", arg, "'; '", command.name,
                               "' takes one ", command.positional));
    }
    parsed.positional_.push_back(arg);
  }
  return parsed;
}

std::string help_text(const CommandSpec& command) {
  std::string text = "usage: grove " + command.name;
  if (!command.positional.empty()) text += " " + command.positional;
  if (!command.flags.empty()) text += " [options]";
  text += "\n\n" + command.description + "\n";
  if (!command.flags.empty()) {
    text += "\noptions:\n";
    size_t width = 0;
    for (const FlagSpec& flag : command.flags) {
      width = std::max(width, flag.name.size() + 1 + flag.value_name.size());
    }
    for (const FlagSpec& flag : command.flags) {
      std::string left = flag.name + (flag.takes_value() ? " " + flag.value_name : "");
      text += "  " + left + std::string(width - left.size() + 2, ' ') + flag.help + "\n";
    }
    text += "  -h, --help" + std::string(width > 8 ? width - 8 : 2, ' ') + "show this help\n";
  }
  return text;
}

int64_t parse_positive_int(const std::string& flag, const std::string& text, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < 1 || value > max) {
    throw UsageError(str_cat(flag, " expects an integer from 1 to ", max, ", found '", text, "'"));
  }
  return value;
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
