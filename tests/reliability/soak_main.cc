// Long soak of the tree manager (soak.h):
//
//   soak_main --device sim --replays 1000000
//   soak_main --device cuda --seconds 600
//
// Prints the iteration, call and replay counts and the pool figures (bytes,
// live blocks) after the first cycles and at the end; exits 1 when an output
// was wrong or the pool figures drifted, 2 on bad flags, 0 with
// "no CUDA device" when --device cuda has none.
#include <iostream>
#include <limits>
#include <string>

#include "cli/common/flags.h"
#include "runtime/device.h"
#include "runtime/device_context.h"
#include "tests/reliability/soak.h"

namespace {

const grove::cli::CommandSpec kSpec{
    "",
    "soak_main",
    "",
    "Long soak of the tree manager.",
    "Replays the soak scenario and checks every output and the pool figures (bytes, live\n"
    "blocks) between the first cycles and the end.",
    {
        {"--device", "DEVICE", "sim (default) or cuda"},
        {"--replays", "N", "stop after N replays (default 1000000; no limit with --seconds)"},
        {"--seconds", "S", "stop after S seconds"},
        {"--seed", "N", "seed of the scenario"},
    }};

int run(int argc, char** argv) {
  grove::cli::ParsedFlags flags = grove::cli::parse_flags(kSpec, argc, argv);
  if (flags.help_requested()) {
    std::cout << grove::cli::help_text(kSpec);
    return 0;
  }
  grove::reliability::SoakOptions options;
  options.replays = 1000000;
  if (flags.has("--device")) {
    try {
      options.device = grove::runtime::Device::parse(flags.value("--device"));
    } catch (const grove::Error& error) {
      throw grove::cli::UsageError(std::string("soak_main: --device: ") + error.what());
    }
  }
  const bool replays_given = flags.has("--replays");
  options.replays = flags.integer("--replays", options.replays, 1);
  if (flags.has("--seconds")) options.seconds = flags.positive_number("--seconds", 0);
  options.seed =
      static_cast<uint64_t>(flags.integer("--seed", static_cast<int64_t>(options.seed), 0));
  if (options.seconds > 0 && !replays_given) options.replays = std::numeric_limits<int64_t>::max();
  if (options.device.is_cuda() && grove::runtime::cuda_device_count() == 0) {
    std::cout << "no CUDA device\n";
    return 0;
  }
  std::cout << "soak on " << options.device.str() << ", seed " << options.seed << std::endl;
  grove::reliability::SoakReport report = grove::reliability::run_soak(options);
  std::cout << report.str() << std::endl;
  return report.problem.empty() && report.start == report.end ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const grove::cli::UsageError& error) {
    std::cerr << error.what() << " (see soak_main --help)\n";
    return 2;
  }
}
