// The fuzz loop shared by the CI test and the standalone binary: program
// seeds seed, seed+1, ... each generate a program (program_generator.h) and a
// call sequence (differential.h); every `training_every`-th case is a
// training case instead, and every `gradient_every`-th a gradient check
// against finite differences (gradient_check.h). The first failure is reduced and reported with its
// seeds and the reduced program as JSON.
//
//   FuzzSummary summary = run_fuzz({.device = runtime::kSimDevice, .programs = 40});
//   if (!summary.failures.empty()) std::cout << summary.failures[0];
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace grove::fuzz {

struct FuzzOptions {
  runtime::Device device = runtime::kSimDevice;
  uint64_t seed = 1;
  int programs = 20;       // upper bound on cases
  double seconds = 0;      // > 0: stop starting new cases after this long
  int calls = 8;           // calls per program
  int training_steps = 4;  // steps per training case
  int training_every = 5;  // every n-th case trains (0: never)
  int gradient_every = 0;  // every n-th case checks gradients (0: never; wins over training)
  int gradient_steps = 3;  // steps per gradient case (gradient_check.h)
  bool reduce = true;      // reduce the first failure
  std::ostream* progress = nullptr;  // a line per failure and a summary, when set
};

struct FuzzSummary {
  int programs = 0;  // inference cases run
  int training_cases = 0;
  int gradient_cases = 0;
  int calls = 0;    // calls (or training steps) on each backend
  int replays = 0;  // graph replays among them
  int stale_retries = 0;
  int skipped_gradient_checks = 0;    // gradient_check.h: kinks within a step, huge values
  std::vector<std::string> failures;  // seeds, failure, reduced JSON
  double seconds = 0;
  std::string str() const;  // "fuzz: 40 programs, 8 training cases, 352 calls, ..."
};

FuzzSummary run_fuzz(const FuzzOptions& options);

}  // namespace grove::fuzz
