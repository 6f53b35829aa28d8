#include "benchmarks/backend_latency/backend_comparison.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "compiler/backends/backend_registry.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"

namespace grove::benchmarks {
namespace {

std::string known_flags(const std::vector<FlagSpec>& known) {
  std::string names = "--help";
  for (const FlagSpec& flag : known) names += ", " + flag.name;
  return names;
}

uint64_t counter(const nlohmann::json& stats, const char* key) {
  auto found = stats.find(key);
  return found != stats.end() && found->is_number_unsigned() ? found->get<uint64_t>() : 0;
}

// Counters only grow; a smaller later value means the manager was replaced.
uint64_t growth(uint64_t before, uint64_t after) {
  return after >= before ? after - before : after;
}

}  // namespace

std::string FlagValues::text(const std::string& name, const std::string& fallback) const {
  auto found = values_.find(name);
  return found == values_.end() ? fallback : found->second;
}

int64_t FlagValues::integer(const std::string& name, int64_t fallback, int64_t minimum,
                            int64_t maximum) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(found->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != found->second.size() || value < minimum || value > maximum) {
    throw UsageError(str_cat(program_, ": ", name, " expects an integer in [", minimum, ", ",
                             maximum, "], found '", found->second, "'"));
  }
  return value;
}

double FlagValues::positive_number(const std::string& name, double fallback) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(found->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != found->second.size() || !(value > 0)) {
    throw UsageError(
        str_cat(program_, ": ", name, " expects a positive number, found '", found->second, "'"));
  }
  return value;
}

std::vector<std::string> FlagValues::list(const std::string& name,
                                          const std::vector<std::string>& fallback) const {
  auto found = values_.find(name);
  if (found == values_.end()) return fallback;
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= found->second.size()) {
    size_t comma = found->second.find(',', start);
    if (comma == std::string::npos) comma = found->second.size();
    std::string item = found->second.substr(start, comma - start);
    if (item.empty()) {
      throw UsageError(str_cat(program_, ": ", name,
                               " expects a comma-separated list without empty items, found '",
                               found->second, "'"));
    }
    items.push_back(item);
    start = comma + 1;
  }
  return items;
}

FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      values["--help"] = "";
      continue;
    }
    bool is_known = std::any_of(known.begin(), known.end(),
                                [&](const FlagSpec& spec) { return spec.name == flag; });
    if (!is_known) {
      throw UsageError(
          str_cat(program, ": unknown flag '", flag, "'; known flags: ", known_flags(known)));
    }
    if (i + 1 >= argc) {
      throw UsageError(str_cat(program, ": flag ", flag, " needs a value"));
    }
    values[flag] = argv[++i];
  }
  return FlagValues(program, std::move(values));
}

std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known) {
  std::string text = summary + "\n\nusage: " + program;
  for (const FlagSpec& flag : known) text += " [" + flag.name + " " + flag.value + "]";
  text += "\n\n";
  for (const FlagSpec& flag : known) {
    std::string left = "  " + flag.name + " " + flag.value;
    left.resize(std::max<size_t>(left.size() + 2, 26), ' ');
    text += left + flag.help + "\n";
  }
  return text;
}

runtime::Device resolve_device(const std::string& flag) {
  runtime::Device device =
      flag == "auto" ? runtime::default_device() : runtime::Device::parse(flag);
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(), "--device ", flag,
                 ": these benchmarks need a device with streams and graphs; use cuda, sim or auto");
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "--device ", flag, ": ",
                 device.str(), " is not available on this machine; use --device auto or sim");
  return device;
}

bool backend_registered(const std::string& name) {
  std::vector<std::string> names = compiler::backends::backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

nlohmann::json tree_counters(runtime::Device device) {
  return cudagraph_trees::tree_manager_for(device).stats();
}

void mark_graph_step_begin() { cudagraph_trees::mark_step_begin(); }

GraphActivity graph_activity(const nlohmann::json& before, const nlohmann::json& after) {
  GraphActivity activity;
  auto delta = [&](const char* key) { return growth(counter(before, key), counter(after, key)); };
  activity.warmups = delta("warmups");
  activity.recordings = delta("recordings");
  activity.replays = delta("replays");
  activity.eager_calls = delta("eager_calls");
  activity.capture_failures = delta("capture_failures");
  auto calls = after.find("fallback_calls");
  if (calls != after.end() && calls->is_object()) {
    nlohmann::json earlier = before.value("fallback_calls", nlohmann::json::object());
    for (const auto& [reason, count] : calls->items()) {
      uint64_t from = earlier.contains(reason) ? earlier[reason].get<uint64_t>() : 0;
      uint64_t added = growth(from, count.get<uint64_t>());
      if (added > 0) activity.fallbacks[reason] = added;
    }
  }
  return activity;
}

nlohmann::json GraphActivity::to_json() const {
  return nlohmann::json{{"warmups", warmups},
                        {"recordings", recordings},
                        {"replays", replays},
                        {"eager_calls", eager_calls},
                        {"capture_failures", capture_failures},
                        {"fallback_calls", fallbacks}};
}

std::string GraphActivity::summary() const {
  std::string text = str_cat(recordings, " rec / ", replays, " replays");
  if (eager_calls > 0) text += str_cat(" / ", eager_calls, " eager");
  for (const auto& [reason, count] : fallbacks) text += str_cat(" (", reason, ": ", count, ")");
  return text;
}

compiler::TensorList random_inputs(const compiler::ir::Program& program, runtime::Device device,
                                   uint64_t seed, int64_t integer_bound) {
  GROVE_CHECK(integer_bound > 0, "random_inputs: integer_bound must be positive, found ",
              integer_bound);
  std::mt19937_64 rng(seed);
  compiler::TensorList inputs;
  for (compiler::ir::ValueId id : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    const compiler::ir::Value& value = program.value(id);
    auto count = static_cast<size_t>(runtime::shape_numel(value.type.shape));
    if (value.type.dtype == runtime::DType::kI64) {
      std::uniform_int_distribution<int64_t> uniform(0, integer_bound - 1);
      std::vector<int64_t> values(count);
      for (int64_t& v : values) v = uniform(rng);
      inputs.push_back(runtime::Tensor::from_vector(values, value.type.shape, device));
    } else {
      GROVE_CHECK_AS(DTypeError, value.type.dtype == runtime::DType::kF32, "random_inputs: input '",
                     value.name, "' of ", program.name(), " is ",
                     runtime::dtype_name(value.type.dtype),
                     "; the benchmarks generate only f32 and i64 inputs");
      std::uniform_real_distribution<float> uniform(-1.f, 1.f);
      std::vector<float> values(count);
      for (float& v : values) v = uniform(rng);
      inputs.push_back(runtime::Tensor::from_vector(values, value.type.shape, device));
    }
  }
  return inputs;
}

bool bitwise_equal(const compiler::TensorList& a, const compiler::TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype()) return false;
    if (a[i].to_host_bytes() != b[i].to_host_bytes()) return false;
  }
  return true;
}

std::string activity_cell(const std::optional<GraphActivity>& activity) {
  return activity ? activity->summary() : "";
}

std::string unmeasured_cell(const std::string& error) {
  if (error.empty()) return kNotRegistered;
  return "FAILED: " + (error.size() > 60 ? error.substr(0, 57) + "..." : error);
}

int benchmark_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << error.what() << "\n(run with --help for the flags)" << std::endl;
    return 2;
  } catch (const Error& error) {
    std::cerr << program << ": " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace grove::benchmarks
