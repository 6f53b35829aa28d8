#include "benchmarks/common/flags.h"

#include <cstdio>
#include <iostream>

#include "runtime/device_context.h"

namespace grove::benchmarks {
namespace {

cli::CommandSpec command_spec(const std::string& program, const std::string& summary,
                              const std::vector<FlagSpec>& known) {
  return cli::CommandSpec{"", program, "", summary, summary, known};
}

}  // namespace

FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known) {
  return FlagValues(cli::parse_flags(command_spec(program, "", known), argc, argv));
}

std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known) {
  return cli::help_text(command_spec(program, summary, known));
}

std::optional<FlagValues> parse_flags_or_help(const std::string& program,
                                              const std::string& summary, int argc, char** argv,
                                              const std::vector<FlagSpec>& known) {
  FlagValues flags = parse_flags(program, argc, argv, known);
  if (!flags.help_requested()) return flags;
  std::fputs(usage_text(program, summary, known).c_str(), stdout);
  return std::nullopt;
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
    std::string message = error.what();
    if (message.find("--help") == std::string::npos) {
      message += std::string(" (see ") + program + " --help)";
    }
    std::cerr << message << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << program << ": " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace grove::benchmarks
