// Standalone differential fuzzer (a longer run than CI's, e.g. on cuda):
//
//   fuzz_main --device cuda --seconds 600 --seed 1
//   fuzz_main --device sim --programs 200 --calls 12
//   fuzz_main --device sim --seconds 120 --gradient-every 1   # gradient checks only
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

#include "cli/common/flags.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "tests/fuzz/differential.h"
#include "tests/fuzz/fuzz_driver.h"

namespace {

const grove::cli::CommandSpec kSpec{
    "",
    "fuzz_main",
    "",
    "Differential fuzzer: cudagraphs against eager on random programs.",
    "Runs random programs and call sequences with the cudagraphs and eager backends and\n"
    "compares them bitwise; prints each failure with its reduced program and a summary.",
    {
        {"--device", "DEVICE", "sim (default) or cuda"},
        {"--seconds", "S", "stop after S seconds (default 60; 0 with --programs alone)"},
        {"--seed", "N", "first program seed (default 1)"},
        {"--programs", "N", "stop after N programs (default: no limit)"},
        {"--calls", "N", "calls per program (default 8)"},
        {"--training-every", "N", "every Nth case trains (default 5; 0: never)"},
        {"--gradient-every", "N",
         "every Nth case checks gradients against finite differences (default 0: never)"},
        {"--program", "FILE", "replay one saved program with the call sequence of --seed"},
    }};

grove::runtime::Device parse_device(const std::string& text) {
  try {
    return grove::runtime::Device::parse(text);
  } catch (const grove::Error& error) {
    throw grove::cli::UsageError(std::string("fuzz_main: --device: ") + error.what());
  }
}

int run(int argc, char** argv) {
  grove::cli::ParsedFlags flags = grove::cli::parse_flags(kSpec, argc, argv);
  if (flags.help_requested()) {
    std::cout << grove::cli::help_text(kSpec);
    return 0;
  }
  grove::fuzz::FuzzOptions options;
  options.programs = 1000000;
  options.seconds = 60;
  if (flags.has("--device")) options.device = parse_device(flags.value("--device"));
  const bool seconds_given = flags.has("--seconds");
  const bool programs_given = flags.has("--programs");
  options.seconds = flags.positive_number("--seconds", options.seconds);
  options.seed =
      static_cast<uint64_t>(flags.integer("--seed", static_cast<int64_t>(options.seed), 0));
  options.programs = static_cast<int>(flags.integer("--programs", options.programs, 1, 1 << 30));
  options.calls = static_cast<int>(flags.integer("--calls", options.calls, 1, 1 << 20));
  options.training_every =
      static_cast<int>(flags.integer("--training-every", options.training_every, 0, 1 << 30));
  options.gradient_every =
      static_cast<int>(flags.integer("--gradient-every", options.gradient_every, 0, 1 << 30));
  const std::string program_file = flags.value("--program");
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

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const grove::cli::UsageError& error) {
    std::cerr << error.what() << " (see fuzz_main --help)\n";
    return 2;
  }
}
