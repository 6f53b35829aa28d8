#include "benchmarks/common/load_options.h"

#include <algorithm>
#include <sstream>

#include "compiler/backends/backend_registry.h"
#include "runtime/error.h"

namespace grove::benchmarks {
namespace {

std::string join(const std::vector<double>& values) {
  std::ostringstream text;
  for (size_t i = 0; i < values.size(); ++i) text << (i ? "," : "") << values[i];
  return text.str();
}

std::vector<std::string> texts(const std::vector<double>& values) {
  std::vector<std::string> result;
  for (double value : values) {
    std::ostringstream text;
    text << value;
    result.push_back(text.str());
  }
  return result;
}

}  // namespace

std::vector<FlagSpec> load_flags(const LoadDefaults& defaults) {
  return {
      kDeviceFlag,
      {"--models", "DIR", "directory of the model JSON files (default benchmarks/models)"},
      {"--model", "NAME", "model served, batched along its 'batch' dim (default mlp16x512)"},
      {"--backends", "B1,B2", "execution backends (default eager,cudagraphs)"},
      {"--rates", "R1,R2",
       str_cat("offered requests per second (default ", join(defaults.rates), ")")},
      {"--max-batches", "M1,M2",
       "max rows per batch; buckets are the powers of 2 up to it (default 16,64)"},
      {"--duration-ms", "MS",
       str_cat("arrivals per (rate, backend) span this long (default ", defaults.duration_ms, ")")},
      {"--max-wait-us", "US", "ServerConfig::max_wait (default 200)"},
      {"--copy-rows-apart", "",
       "ServerConfig::gather_inputs off: a batch's rows copied to the device request by "
       "request, not gathered into one copy (the A/B of the default)"},
      {"--seed", "N", "seed of arrivals and request values (default 2026)"},
      kJsonFlag,
  };
}

LoadOptions parse_load(const std::string& program, const FlagValues& flags,
                       const LoadDefaults& defaults) {
  LoadOptions options;
  options.device = resolve_device(flags.text("--device", "auto"));
  options.models_dir = flags.text("--models", options.models_dir);
  options.model = flags.text("--model", options.model);
  options.backends = flags.list("--backends", options.backends);
  const std::vector<std::string> registered = compiler::backends::backend_names();
  for (const std::string& backend : options.backends) {
    if (std::find(registered.begin(), registered.end(), backend) == registered.end()) {
      throw UsageError(str_cat(program, ": --backends: '", backend, "' is not registered here"));
    }
  }
  for (const std::string& item : flags.list("--rates", texts(defaults.rates))) {
    options.rates.push_back(FlagValues(program, {{"--rates", item}}).positive_number("--rates", 1));
  }
  options.max_batches.clear();
  for (const std::string& item : flags.list("--max-batches", {"16", "64"})) {
    options.max_batches.push_back(
        FlagValues(program, {{"--max-batches", item}}).integer("--max-batches", 1, 1, 4096));
  }
  options.duration_ms = flags.integer("--duration-ms", defaults.duration_ms, 1, 600000);
  options.max_wait_us = flags.integer("--max-wait-us", options.max_wait_us, 0, 10000000);
  options.gather_inputs = !flags.has("--copy-rows-apart");
  options.seed = static_cast<uint64_t>(flags.integer("--seed", 2026, 0));
  options.json_path = flags.text("--json", "");
  return options;
}

}  // namespace grove::benchmarks
