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

#include "runtime/device.h"
#include "runtime/device_context.h"
#include "tests/reliability/soak.h"

int main(int argc, char** argv) {
  grove::reliability::SoakOptions options;
  options.replays = 1000000;
  bool replays_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "soak_main: flag " << flag << " needs a value\n";
      return 2;
    }
    std::string value = argv[++i];
    try {
      if (flag == "--device") {
        options.device = grove::runtime::Device::parse(value);
      } else if (flag == "--replays") {
        options.replays = std::stoll(value);
        replays_given = true;
      } else if (flag == "--seconds") {
        options.seconds = std::stod(value);
      } else if (flag == "--seed") {
        options.seed = std::stoull(value);
      } else {
        std::cerr << "soak_main: unknown flag " << flag
                  << "\nusage: soak_main [--device sim|cuda] [--replays N] [--seconds S] [--seed N]\n";
        return 2;
      }
    } catch (const std::exception& error) {
      std::cerr << "soak_main: bad value '" << value << "' for " << flag << ": " << error.what() << "\n";
      return 2;
    }
  }
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
