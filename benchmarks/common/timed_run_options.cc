#include "benchmarks/common/timed_run_options.h"

#include "runtime/error.h"

namespace grove::benchmarks {

std::vector<FlagSpec> timed_run_flags(const TimedRunDefaults& defaults) {
  return {
      kDeviceFlag,
      {"--iters", "N",
       str_cat("timed ", defaults.unit, " per backend and case (default ", defaults.iters,
               defaults.iters_note, ")")},
      {"--warmup", "N",
       str_cat("untimed ", defaults.unit, " before timing (default ", defaults.warmup,
               ", at least 3)")},
      kJsonFlag,
      {"--models", "DIR", "directory of the model JSON files (default benchmarks/models)"},
  };
}

TimedRunOptions parse_timed_run(const FlagValues& flags, const TimedRunDefaults& defaults) {
  TimedRunOptions options;
  options.device = resolve_device(flags.text("--device", "auto"));
  options.iters = flags.integer("--iters", defaults.iters, 1);
  options.warmup = flags.integer("--warmup", defaults.warmup, 3);
  options.json_path = flags.text("--json", "");
  options.models_dir = flags.text("--models", options.models_dir);
  return options;
}

}  // namespace grove::benchmarks
