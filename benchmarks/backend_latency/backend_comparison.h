// What the benchmarks that compare execution backends ("eager" against
// "cudagraphs") share: command-line flags, the device choice, seeded random
// inputs, and the tree manager's counters read from its stats() JSON.
//
//   FlagValues flags = parse_flags("backend_latency", argc, argv, {{"--iters", "N", "..."}});
//   runtime::Device device = resolve_device(flags.text("--device", "auto"));
//   nlohmann::json before = tree_counters(device);
//   ... calls ...
//   GraphActivity activity = graph_activity(before, tree_counters(device));
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace grove::benchmarks {

inline constexpr const char* kEagerBackend = "eager";
inline constexpr const char* kNotRegistered = "cudagraphs backend not registered";
inline constexpr const char* kGraphBackend = "cudagraphs";

// A bad command line: unknown flag, missing or malformed value.
class UsageError : public Error {
 public:
  using Error::Error;
};

struct FlagSpec {
  std::string name;   // "--iters"
  std::string value;  // "N" (shown in the usage text)
  std::string help;
};

// The values given on the command line, by flag name ("--iters").
class FlagValues {
 public:
  FlagValues(std::string program, std::map<std::string, std::string> values)
      : program_(std::move(program)), values_(std::move(values)) {}

  bool help_requested() const { return values_.count("--help") > 0; }
  std::string text(const std::string& name, const std::string& fallback) const;
  // Throws UsageError naming the flag when the value is not an integer in
  // [minimum, maximum].
  int64_t integer(const std::string& name, int64_t fallback, int64_t minimum,
                  int64_t maximum = INT64_MAX) const;
  // Throws UsageError naming the flag when the value is not a positive number.
  double positive_number(const std::string& name, double fallback) const;
  // A comma-separated list ("eager,cudagraphs").
  std::vector<std::string> list(const std::string& name,
                                const std::vector<std::string>& fallback) const;

 private:
  std::string program_;
  std::map<std::string, std::string> values_;
};

// Parses "--flag value" pairs (and "--help"); throws UsageError for a flag
// not in `known` or without a value, listing the known flags.
FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known);
// "usage: <program> [--flag VALUE] ...", one line per flag with its help.
std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known);

// "auto": cuda:0 when a CUDA device exists, else sim:0; otherwise a device
// name ("cuda", "sim", "cuda:1"). Throws DeviceError when that device is
// absent or cannot run graphs (cpu).
runtime::Device resolve_device(const std::string& flag);

// Whether an execution backend of that name is registered in this binary.
bool backend_registered(const std::string& name);

// The counters of the calling thread's tree manager of `device`
// (cudagraph_trees::TreeManager::stats()).
nlohmann::json tree_counters(runtime::Device device);

// What the tree did between two stats() snapshots.
struct GraphActivity {
  uint64_t warmups = 0;
  uint64_t recordings = 0;
  uint64_t replays = 0;
  uint64_t eager_calls = 0;  // calls that fell back to eager
  uint64_t capture_failures = 0;
  std::map<std::string, uint64_t> fallbacks;  // fallback calls by reason

  nlohmann::json to_json() const;
  // "3 rec / 200 replays" plus fallbacks, for a table cell.
  std::string summary() const;
};
GraphActivity graph_activity(const nlohmann::json& before, const nlohmann::json& after);
// A table cell: the activity's summary, or empty when there is none.
std::string activity_cell(const std::optional<GraphActivity>& activity);
// A table cell for a row that was not measured: kNotRegistered when `error` is
// empty, else "FAILED: " and the error cut to fit.
std::string unmeasured_cell(const std::string& error);

// A benchmark's main(): runs `run`, and turns a UsageError into exit 2 and any
// other grove::Error into one line "<program>: <message>" and exit 1.
int benchmark_main(const char* program, int (*run)(int, char**), int argc, char** argv);

// cudagraph_trees::mark_step_begin() on the calling thread's tree managers:
// what a training loop calls before each step under the graph backend (as
// PyTorch's torch.compiler.cudagraph_mark_step_begin()).
void mark_graph_step_begin();

// Seeded random values for every `input` of `program`, in call order, on
// `device`: floats uniform in [-1, 1), integers uniform in [0, integer_bound).
compiler::TensorList random_inputs(const compiler::ir::Program& program, runtime::Device device,
                                   uint64_t seed, int64_t integer_bound);

// Whether two tensor lists hold the same bytes, tensor by tensor.
bool bitwise_equal(const compiler::TensorList& a, const compiler::TensorList& b);

}  // namespace grove::benchmarks
