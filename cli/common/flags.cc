#include "cli/common/flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>

namespace grove::cli {
namespace {

std::string flag_list(const CommandSpec& command) {
  std::string names;
  for (const FlagSpec& flag : command.flags) names += (names.empty() ? "" : ", ") + flag.name;
  return names.empty() ? "none" : names;
}

// Every option is registered so that CLI11 tokenizes the command line
// ("--flag value", "--flag=value", switches) and keeps repeats and missing
// values countable; the checks below then name the flag in grove's words.
struct Registered {
  const FlagSpec* spec;
  CLI::Option* option;
};

}  // namespace

ParsedFlags::ParsedFlags(std::string command, bool help_requested,
                         std::vector<std::string> positional,
                         std::map<std::string, std::string> values)
    : command_(std::move(command)),
      help_requested_(help_requested),
      positional_(std::move(positional)),
      values_(std::move(values)) {}

std::string ParsedFlags::value(const std::string& flag, const std::string& fallback) const {
  auto found = values_.find(flag);
  return found == values_.end() ? fallback : found->second;
}

int64_t ParsedFlags::integer(const std::string& flag, int64_t fallback, int64_t minimum,
                             int64_t maximum) const {
  if (!has(flag)) return fallback;
  try {
    return parse_integer(flag, value(flag), minimum, maximum);
  } catch (const UsageError& error) {
    throw UsageError(str_cat(command_, ": ", error.what()));
  }
}

double ParsedFlags::finite_number(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const std::string text = value(flag);
  size_t used = 0;
  double number = 0;
  try {
    if (!text.empty() && !std::isspace(static_cast<unsigned char>(text[0]))) {
      number = std::stod(text, &used);
    }
  } catch (const std::exception&) {  // std::out_of_range past a double's range (1e400)
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(number)) {
    throw UsageError(
        str_cat(command_, ": ", flag, " expects a finite decimal number, found '", text, "'"));
  }
  return number;
}

double ParsedFlags::positive_number(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const double number = finite_number(flag, fallback);
  if (!(number > 0)) {
    throw UsageError(
        str_cat(command_, ": ", flag, " expects a positive number, found '", value(flag), "'"));
  }
  return number;
}

std::vector<std::string> ParsedFlags::list(const std::string& flag,
                                           const std::vector<std::string>& fallback) const {
  if (!has(flag)) return fallback;
  const std::string text = value(flag);
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    if (item.empty()) {
      throw UsageError(str_cat(command_, ": ", flag,
                               " expects a comma-separated list without empty items, found '", text,
                               "'"));
    }
    items.push_back(item);
    start = comma + 1;
  }
  return items;
}

ParsedFlags parse_flags(const CommandSpec& command, const std::vector<std::string>& args) {
  const std::string where = command.name + ": ";
  CLI::App app{command.description, command.invocation()};
  app.set_help_flag();  // help is a switch here, answered by the caller
  app.allow_extras();   // reported below, in grove's words
  CLI::Option* help = app.add_flag("-h,--help");
  std::vector<Registered> options;
  for (const FlagSpec& flag : command.flags) {
    CLI::Option* option =
        flag.takes_value() ? app.add_option(flag.name)->expected(0, 1) : app.add_flag(flag.name);
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    if (!flag.takes_value()) option->disable_flag_override();
    options.push_back({&flag, option});
  }
  CLI::Option* positional = command.positional.empty() ? nullptr : app.add_option("positional");

  // CLI11 wants argv order reversed when given a vector.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch&) {
    // Only a switch given a value ("--train=yes") gets here.
    for (const std::string& arg : args) {
      std::string name = arg.substr(0, arg.find('='));
      for (const FlagSpec& flag : command.flags) {
        if (name != arg && flag.name == name && !flag.takes_value()) {
          throw UsageError(str_cat(where, "option ", name, " is a switch and takes no value"));
        }
      }
    }
    throw UsageError(
        str_cat(where, "a switch was given a value (see ", command.invocation(), " --help)"));
  } catch (const CLI::ParseError& error) {
    throw UsageError(str_cat(where, error.what(), " (see ", command.invocation(), " --help)"));
  }

  std::vector<std::string> extras = app.remaining();
  // CLI11 binds the first positional argument; the later ones a spec names
  // arrive as extras, in order.
  std::vector<std::string> positionals;
  if (positional != nullptr && positional->count() > 0) positionals = positional->results();
  while (!extras.empty() && positionals.size() < command.positional_count() &&
         !(extras.front().size() > 1 && extras.front()[0] == '-')) {
    positionals.push_back(extras.front());
    extras.erase(extras.begin());
  }
  for (const std::string& extra : extras) {
    if (extra.size() > 1 && extra[0] == '-') {
      throw UsageError(str_cat(where, "unknown option '", extra.substr(0, extra.find('=')),
                               "'; options of '", command.name, "': ", flag_list(command), " (see ",
                               command.invocation(), " --help)"));
    }
  }
  if (!extras.empty()) {
    if (positional == nullptr) {
      throw UsageError(str_cat(where, "unexpected argument '", extras.front(), "'; '", command.name,
                               "' takes no positional arguments"));
    }
    throw UsageError(str_cat(where, "unexpected argument '", extras.front(), "'; '", command.name,
                             "' takes ", command.positional_count() == 1 ? "one " : "only ",
                             command.positional));
  }

  std::map<std::string, std::string> values;
  for (const Registered& each : options) {
    const FlagSpec& flag = *each.spec;
    if (each.option->count() == 0) continue;
    if (each.option->count() > 1) {
      throw UsageError(str_cat(where, "option ", flag.name, " is given twice; give it once"));
    }
    std::string value;
    if (flag.takes_value()) {
      const std::vector<std::string>& results = each.option->results();
      if (results.empty() || results.front().empty()) {
        throw UsageError(str_cat(where, "option ", flag.name, " needs a value (", flag.name, " ",
                                 flag.value_name, ")"));
      }
      value = results.front();
    }
    values[flag.name] = value;
  }
  return ParsedFlags(command.name, help->count() > 0, std::move(positionals), std::move(values));
}

size_t CommandSpec::positional_count() const {
  size_t words = 0;
  bool in_word = false;
  for (char c : positional) {
    if (c != ' ' && !in_word) ++words;
    in_word = c != ' ';
  }
  return words;
}

ParsedFlags parse_flags(const CommandSpec& command, int argc, char** argv) {
  return parse_flags(command, std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
}

std::string help_text(const CommandSpec& command) {
  std::string text = "usage: " + command.invocation();
  if (!command.positional.empty()) text += " " + command.positional;
  if (!command.flags.empty()) text += " [options]";
  text += "\n\n" + command.description + "\n\noptions:\n";
  size_t width = std::string("-h, --help").size();
  for (const FlagSpec& flag : command.flags) {
    width = std::max(width, flag.name.size() + 1 + flag.value_name.size());
  }
  auto line = [&](const std::string& left, const std::string& help) {
    text += "  " + left + std::string(width - left.size() + 2, ' ') + help + "\n";
  };
  for (const FlagSpec& flag : command.flags) {
    line(flag.name + (flag.takes_value() ? " " + flag.value_name : ""), flag.help);
  }
  line("-h, --help", "show this help");
  return text;
}

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t minimum,
                      int64_t maximum) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < minimum || value > maximum) {
    std::string range = maximum == INT64_MAX ? str_cat("of at least ", minimum)
                                             : str_cat("from ", minimum, " to ", maximum);
    throw UsageError(str_cat(flag, " expects an integer ", range, ", found '", text, "'"));
  }
  return value;
}

}  // namespace grove::cli
