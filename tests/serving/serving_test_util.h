// Shared by the serving tests: a small two-input, two-output model (fast on
// sim), seeded random request rows, a hold on the worker (through
// ServerConfig::before_batch) so tests queue requests deterministically, and
// the model run eagerly on one request alone as the reference answer.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "compiler/backends/compile.h"
#include "serving/server.h"

namespace grove::serving::test_support {

inline constexpr int64_t kXWidth = 8;      // input "x": [batch, 8] f32
inline constexpr int64_t kShiftWidth = 4;  // input "shift": [batch, 4] f32
// Outputs: "out" = linear(gelu(linear(x))) + shift, [batch, 4]; "hidden" =
// gelu(linear(x)), [batch, 16].
ProgramFactory tiny_model();
// The same model with its JSON edited first (to build malformed variants).
ProgramFactory tiny_model_with(const std::function<void(nlohmann::json&)>& edit);

// A request of `rows` rows: x and shift uniform in [-2, 2), none zero.
Request random_request(std::mt19937& rng, int64_t rows);

// The model compiled with "eager" at batch = the request's rows, on `device`,
// run on the request alone: what the server must answer.
std::vector<HostRows> reference_outputs(const Request& request, runtime::Device device);

// Whether two responses' outputs hold the same shapes, dtypes and bytes.
bool same_bits(const std::vector<HostRows>& a, const std::vector<HostRows>& b);
// Largest |a - b| over all f32 elements of all outputs (infinity when shapes differ).
double max_abs_difference(const std::vector<HostRows>& a, const std::vector<HostRows>& b);

// Holds the worker inside before_batch until release(): install with
// config.before_batch = gate.hook(). Only the first `hold_batches` batches
// are held.
class WorkerGate {
 public:
  explicit WorkerGate(int hold_batches = 1) : hold_batches_(hold_batches) {}
  std::function<void(int64_t, runtime::Device)> hook();
  // Blocks until `count` batches have entered the hook.
  void wait_for_entries(int count);
  void release();
  std::vector<int64_t> batch_rows() const;
  std::vector<runtime::Device> batch_devices() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int hold_batches_;
  int entered_ = 0;
  bool released_ = false;
  std::vector<int64_t> rows_;
  std::vector<runtime::Device> devices_;
};

}  // namespace grove::serving::test_support
