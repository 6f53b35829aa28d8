// The flags every benchmark that times calls of compiled models shares
// (backend_latency, train_step), one table and one parser: --device, --iters,
// --warmup, --json and --models. A benchmark appends its own flags:
//
//   const TimedRunDefaults kTimed{.unit = "calls", .iters = 200, .warmup = 20};
//   std::vector<FlagSpec> flags = timed_run_flags(kTimed);  // then its own
//   struct Options : TimedRunOptions { ... };
//   static_cast<TimedRunOptions&>(options) = parse_timed_run(flags, kTimed);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "runtime/device.h"

namespace grove::benchmarks {

struct TimedRunOptions {
  runtime::Device device;                        // --device (auto: cuda when present, else sim)
  int64_t iters = 0;                             // --iters: timed calls (or steps)
  int64_t warmup = 0;                            // --warmup: untimed ones before them, at least 3
  std::string json_path;                         // --json
  std::string models_dir = "benchmarks/models";  // --models
};

struct TimedRunDefaults {
  const char* unit = "calls";  // what --iters counts: "calls", "steps"
  int64_t iters = 200;
  int64_t warmup = 20;
  const char* iters_note = "";  // appended to --iters' help, e.g. "; use a few on sim"
};

std::vector<FlagSpec> timed_run_flags(const TimedRunDefaults& defaults);
// Throws UsageError naming the flag; DeviceError for an absent device.
TimedRunOptions parse_timed_run(const FlagValues& flags, const TimedRunDefaults& defaults);

}  // namespace grove::benchmarks
