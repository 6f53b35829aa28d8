// Standalone differential fuzzer (a longer run than CI's, e.g. on cuda):
//
//   fuzz_main --device cuda --seconds 600 --seed 1
//   fuzz_main --device sim --programs 200 --calls 12
//   GROVE_FUZZ_TRACE=1 fuzz_main --device sim --program reduced.json --seed 23188
//
// --program runs one saved program (a reduced failure's JSON) with the call
// sequence of scenario seed --seed, once, without reducing it; with
// GROVE_FUZZ_TRACE=1 each call's binding and the tree are printed.
//
// Prints each failure (seeds, what differed, the reduced program as JSON)
// and a final summary line; exits 1 when anything failed, 2 on bad flags,
// 0 with "no CUDA device" when --device cuda has none.
#include <cstdlib>
#include <iostream>
#include <string>

#include "runtime/device.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "compiler/model_format/model_json.h"
#include "tests/fuzz/differential.h"
#include "tests/fuzz/fuzz_driver.h"

namespace {

int usage(const std::string& problem) {
  std::cerr << "fuzz_main: " << problem
            << "\nusage: fuzz_main [--device sim|cuda] [--seconds S] [--seed N] [--programs N]"
               " [--calls N] [--training-every N] [--program FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  grove::fuzz::FuzzOptions options;
  options.programs = 1000000;
  options.seconds = 60;
  bool programs_given = false, seconds_given = false;
  std::string program_file;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return usage("flag " + flag + " needs a value");
    std::string value = argv[++i];
    try {
      if (flag == "--device") {
        options.device = grove::runtime::Device::parse(value);
      } else if (flag == "--seconds") {
        options.seconds = std::stod(value);
        seconds_given = true;
      } else if (flag == "--seed") {
        options.seed = std::stoull(value);
      } else if (flag == "--programs") {
        options.programs = std::stoi(value);
        programs_given = true;
      } else if (flag == "--calls") {
        options.calls = std::stoi(value);
      } else if (flag == "--program") {
        program_file = value;
      } else if (flag == "--training-every") {
        options.training_every = std::stoi(value);
      } else {
        return usage("unknown flag " + flag);
      }
    } catch (const std::exception& error) {
      return usage("bad value '" + value + "' for " + flag + ": " + error.what());
    }
  }
  if (programs_given && !seconds_given) options.seconds = 0;
  if (options.device.is_cuda() && grove::runtime::cuda_device_count() == 0) {
    std::cout << "no CUDA device\n";
    return 0;
  }
  if (!program_file.empty()) {
    grove::compiler::ir::Program program =
        grove::compiler::model_format::load_model_file(program_file, {}, options.device);
    grove::fuzz::DifferentialOutcome outcome =
        grove::fuzz::run_differential(program, options.seed, options.calls);
    std::cout << program_file << " with scenario seed " << options.seed << ": "
              << (outcome.passed ? "passed" : "FAILURE " + outcome.failure) << "\n";
    return outcome.passed ? 0 : 1;
  }
  options.progress = &std::cout;
  std::cout << "fuzzing on " << options.device.str() << " from seed " << options.seed << "\n";
  grove::fuzz::FuzzSummary summary = grove::fuzz::run_fuzz(options);
  return summary.failures.empty() ? 0 : 1;
}
