// The flags the serving benchmarks share (serve, serve_http), one table and
// one parser: the device, the model, the backends, the offered rates, the
// batch limits, how long each load runs, the server's max wait, the seed and
// the JSON report. A benchmark appends its own flags:
//
//   const LoadDefaults kLoad{.rates = {10000, 40000}, .duration_ms = 750};
//   std::vector<FlagSpec> flags = load_flags(kLoad);  // then its own
//   struct Options : LoadOptions { ... };
//   static_cast<LoadOptions&>(options) = parse_load(kName, flags, kLoad);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "runtime/device.h"

namespace grove::benchmarks {

struct LoadOptions {
  runtime::Device device;                                       // --device
  std::string models_dir = "benchmarks/models";                 // --models
  std::string model = "mlp16x512";                              // --model
  std::vector<std::string> backends = {"eager", "cudagraphs"};  // --backends
  std::vector<double> rates;                                    // --rates, requests per second
  std::vector<int64_t> max_batches = {16, 64};                  // --max-batches
  int64_t duration_ms = 0;                                      // --duration-ms per (rate, backend)
  int64_t max_wait_us = 200;                                    // --max-wait-us
  bool gather_inputs = true;  // ServerConfig::gather_inputs; --copy-rows-apart turns it off
  uint64_t seed = 2026;       // --seed
  std::string json_path;      // --json
};

struct LoadDefaults {
  std::vector<double> rates;
  int64_t duration_ms = 750;
};

std::vector<FlagSpec> load_flags(const LoadDefaults& defaults);
// Throws UsageError naming the flag (a backend not registered in this binary
// included); DeviceError for an absent device.
LoadOptions parse_load(const std::string& program, const FlagValues& flags,
                       const LoadDefaults& defaults);

}  // namespace grove::benchmarks
