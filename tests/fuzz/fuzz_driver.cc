#include "tests/fuzz/fuzz_driver.h"

#include <chrono>
#include <sstream>

#include "runtime/error.h"
#include "tests/fuzz/differential.h"
#include "tests/fuzz/gradient_check.h"
#include "tests/fuzz/program_generator.h"

namespace grove::fuzz {

std::string FuzzSummary::str() const {
  std::ostringstream out;
  out << "fuzz: " << programs << " programs, " << training_cases << " training cases, "
      << gradient_cases << " gradient cases, " << calls << " calls, " << replays << " replays, "
      << stale_retries << " stale-input retries, " << failures.size() << " failures in " << seconds
      << " s";
  if (gradient_cases > 0) out << " (" << skipped_gradient_checks << " gradient checks skipped)";
  return out.str();
}

FuzzSummary run_fuzz(const FuzzOptions& options) {
  FuzzSummary summary;
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int c = 0; c < options.programs; ++c) {
    if (options.seconds > 0 && elapsed() > options.seconds) break;
    uint64_t seed = options.seed + static_cast<uint64_t>(c);
    bool training =
        options.training_every > 0 && c % options.training_every == options.training_every - 1;
    bool gradients =
        options.gradient_every > 0 && c % options.gradient_every == options.gradient_every - 1;
    std::ostringstream report;
    if (gradients) {
      DifferentialOutcome outcome =
          run_gradient_check(seed, options.device, options.gradient_steps);
      ++summary.gradient_cases;
      summary.skipped_gradient_checks += outcome.skipped_checks;
      summary.calls += outcome.calls;
      summary.replays += outcome.replays;
      if (!outcome.passed) {
        report << "gradient case seed " << seed << " on " << options.device.str() << ": "
               << outcome.failure;
      }
    } else if (training) {
      DifferentialOutcome outcome =
          run_training_differential(seed, options.device, options.training_steps);
      ++summary.training_cases;
      summary.calls += outcome.calls;
      summary.replays += outcome.replays;
      if (!outcome.passed) {
        report << "training case seed " << seed << " on " << options.device.str() << ": "
               << outcome.failure << "\n(rerun: fuzz_main --device " << options.device.str()
               << " --seed " << seed << " --programs " << options.training_every << ")";
      }
    } else {
      compiler::ir::Program program = generate_program(seed, options.device);
      DifferentialOutcome outcome = run_differential(program, seed, options.calls);
      ++summary.programs;
      summary.calls += outcome.calls;
      summary.replays += outcome.replays;
      summary.stale_retries += outcome.stale_retries;
      if (!outcome.passed) {
        report << "program seed " << seed << " (scenario seed " << seed << ", " << options.calls
               << " calls) on " << options.device.str() << ": " << outcome.failure;
        if (options.reduce && summary.failures.empty()) {
          ReducedFailure reduced = reduce_failure(program, seed, options.calls);
          report << "\nreduced in " << reduced.attempts << " runs to "
                 << reduced.program.nodes().size() << " nodes; failure: " << reduced.failure
                 << "\nreduced program:\n"
                 << reduced.json;
        } else {
          report << "\nprogram:\n" << program.str();
        }
      }
    }
    if (!report.str().empty()) {
      summary.failures.push_back(report.str());
      if (options.progress != nullptr) *options.progress << "FAILURE " << report.str() << "\n";
    }
  }
  summary.seconds = elapsed();
  if (options.progress != nullptr) *options.progress << summary.str() << std::endl;
  return summary;
}

}  // namespace grove::fuzz
