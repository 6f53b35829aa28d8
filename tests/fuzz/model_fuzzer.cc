#include "tests/fuzz/model_fuzzer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <typeinfo>

#include "cli/model_setup.h"
#include "cli/work_estimate.h"
#include "compiler/backends/compile.h"
#include "compiler/ops/op_registry.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::fuzz {
namespace {

using nlohmann::json;
using Rng = std::mt19937_64;

// Work past which a mutant is compiled but not run (seconds on sim, as
// cli::estimate_work counts them): a case stays well under a second or two.
constexpr double kMaxRunSeconds = 0.2;

int64_t pick(Rng& rng, int64_t low, int64_t high) {  // [low, high]
  return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

template <typename T>
const T& pick_from(Rng& rng, const std::vector<T>& items) {
  return items[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(items.size()) - 1))];
}

// Every place in the document (as JSON pointers), parents before children.
void collect(const json& value, const json::json_pointer& at, std::vector<json::json_pointer>& out,
             int depth) {
  out.push_back(at);
  if (depth > 64) return;
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      collect(it.value(), at / it.key(), out, depth + 1);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) collect(value[i], at / i, out, depth + 1);
  }
}

std::vector<json::json_pointer> places(const json& document,
                                       const std::function<bool(const json&)>& keep) {
  std::vector<json::json_pointer> all;
  collect(document, json::json_pointer(), all, 0);
  std::vector<json::json_pointer> kept;
  for (const auto& at : all) {
    if (keep(document.at(at))) kept.push_back(at);
  }
  return kept;
}

// Numbers at the edges of the types a loader converts them to.
json limit_number(Rng& rng) {
  switch (pick(rng, 0, 17)) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return std::numeric_limits<int32_t>::max();
    case 5:
      return int64_t{1} << 31;
    case 6:
      return int64_t{1} << 32;
    case 7:
      return int64_t{1} << 40;
    case 8:
      return int64_t{1} << 53;
    case 9:
      return std::numeric_limits<int64_t>::max();
    case 10:
      return std::numeric_limits<int64_t>::min();
    case 11:
      return std::numeric_limits<uint64_t>::max();
    case 12:
      return 1e308;
    case 13:
      return -1e308;
    case 14:
      return 4.9e-324;
    case 15:
      return 0.5;
    case 16:
      return -0.0;
    default:
      return pick(rng, -1000, 100000);
  }
}

// A name that is empty, very long, full of control bytes, or another value's.
std::string odd_name(Rng& rng, const std::vector<std::string>& existing) {
  switch (pick(rng, 0, 6)) {
    case 0:
      return "";
    case 1:
      return std::string(static_cast<size_t>(pick(rng, 1000, 100000)), 'n');
    case 2:
      return "a\x1b[2J\x07\x01b";
    case 3:
      return "\xff\xfe not utf-8";
    case 4:
      return existing.empty() ? "x" : pick_from(rng, existing);
    case 5:
      return "x.0";
    default:
      return "undefined_" + std::to_string(pick(rng, 0, 99));
  }
}

std::vector<std::string> value_names(const json& document) {
  std::vector<std::string> names;
  for (const char* list : {"inputs", "params", "buffers", "nodes"}) {
    auto found = document.find(list);
    if (found == document.end() || !found->is_array()) continue;
    for (const json& item : *found) {
      if (item.is_object() && item.contains("name") && item["name"].is_string()) {
        names.push_back(item["name"].get<std::string>());
      }
    }
  }
  return names;
}

// One mutation of `document`; returns what it did.
std::string mutate_once(json& document, Rng& rng) {
  const std::vector<std::string> names = value_names(document);
  auto any = [](const json&) { return true; };
  switch (pick(rng, 0, 11)) {
    case 0: {  // a number at a type limit
      auto numbers = places(document, [](const json& v) { return v.is_number(); });
      if (numbers.empty()) return "no number";
      const auto& at = pick_from(rng, numbers);
      document[at] = limit_number(rng);
      return "number " + at.to_string() + " = " + document[at].dump();
    }
    case 1: {  // a value of another JSON type
      auto all = places(document, any);
      const auto& at = pick_from(rng, all);
      if (at.empty()) return "root kept";
      const json replacements[] = {nullptr,
                                   true,
                                   3,
                                   -2.5,
                                   "batch",
                                   json::array(),
                                   json::object(),
                                   json::array({1, "x", nullptr})};
      document[at] = replacements[pick(rng, 0, 7)];
      return "type " + at.to_string() + " = " + document[at].dump();
    }
    case 2: {  // a field removed
      auto fields = places(document, any);
      const auto& at = pick_from(rng, fields);
      if (at.empty()) return "root kept";
      json& parent = document[at.parent_pointer()];
      if (parent.is_object()) {
        parent.erase(at.back());
      } else if (parent.is_array()) {
        parent.erase(static_cast<size_t>(std::stoul(at.back())));
      }
      return "removed " + at.to_string();
    }
    case 3: {  // an unknown or duplicated field
      auto objects = places(document, [](const json& v) { return v.is_object(); });
      const auto& at = pick_from(rng, objects);
      document[at][pick(rng, 0, 1) ? "surprise" : "attrs"] = limit_number(rng);
      return "field added at " + at.to_string();
    }
    case 4: {  // a node's op replaced by another registered op
      auto ops = places(document, [](const json& v) { return v.is_object() && v.contains("op"); });
      if (ops.empty()) return "no op";
      std::vector<std::string> op_names = compiler::ops::OpRegistry::global().op_names();
      op_names.push_back("gelo");
      const auto& at = pick_from(rng, ops);
      document[at]["op"] = pick_from(rng, op_names);
      return "op " + at.to_string() + " = " + document[at]["op"].dump();
    }
    case 5: {  // an operand replaced by another value, an odd name, or dropped/added
      auto lists = places(document, [](const json& v) {
        return v.is_object() && v.contains("inputs") && v["inputs"].is_array() && v.contains("op");
      });
      if (lists.empty()) return "no node";
      json& inputs = document[pick_from(rng, lists)]["inputs"];
      switch (pick(rng, 0, 2)) {
        case 0:
          if (!inputs.empty()) inputs.erase(inputs.size() - 1);
          return "operand dropped";
        case 1:
          inputs.push_back(names.empty() ? "x" : pick_from(rng, names));
          return "operand added";
        default:
          if (inputs.empty()) return "no operand";
          inputs[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(inputs.size()) - 1))] =
              pick(rng, 0, 1) && !names.empty() ? pick_from(rng, names) : odd_name(rng, names);
          return "operand replaced";
      }
    }
    case 6: {  // a name changed
      auto named = places(document, [](const json& v) {
        return v.is_object() && v.contains("name") && v["name"].is_string();
      });
      const auto& at = pick_from(rng, named);
      document[at]["name"] = odd_name(rng, names);
      return "renamed " + at.to_string();
    }
    case 7: {  // nesting: a value wrapped in arrays
      auto all = places(document, any);
      const auto& at = pick_from(rng, all);
      if (at.empty()) return "root kept";
      int64_t depth = pick(rng, 1, 40);
      json wrapped = document[at];
      for (int64_t i = 0; i < depth; ++i) wrapped = json::array({wrapped});
      document[at] = wrapped;
      return "nested " + at.to_string() + " " + std::to_string(depth) + " deep";
    }
    case 8: {  // size: a node repeated many times as a chain or side by side
      auto& nodes = document["nodes"];
      if (!nodes.is_array() || nodes.empty()) return "no nodes";
      json node = nodes[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(nodes.size()) - 1))];
      int64_t copies = pick(rng, 1, 3000);
      bool chain = pick(rng, 0, 1) == 1 && node.is_object() && node.contains("inputs") &&
                   node["inputs"].is_array() && !node["inputs"].empty();
      std::string previous = node.is_object() && node.contains("name") && node["name"].is_string()
                                 ? node["name"].get<std::string>()
                                 : "x";
      for (int64_t i = 0; i < copies; ++i) {
        json copy = node;
        if (copy.is_object()) {
          copy["name"] = "copy" + std::to_string(i);
          if (chain) copy["inputs"][0] = previous;
        }
        previous = "copy" + std::to_string(i);
        nodes.push_back(copy);
      }
      if (chain && document["outputs"].is_array()) document["outputs"].push_back(previous);
      return "repeated a node " + std::to_string(copies) + (chain ? " times as a chain" : " times");
    }
    case 9: {  // size: an extent multiplied
      auto shapes = places(document, [](const json& v) {
        return v.is_object() && v.contains("shape") && v["shape"].is_array() && !v["shape"].empty();
      });
      if (shapes.empty()) return "no shape";
      json& shape = document[pick_from(rng, shapes)]["shape"];
      json& extent =
          shape[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(shape.size()) - 1))];
      extent = pick(rng, 0, 3) == 0 ? limit_number(rng) : json(pick(rng, 0, 1 << 16));
      return "extent = " + extent.dump();
    }
    case 10: {  // outputs emptied, duplicated or pointed at an input
      json& outputs = document["outputs"];
      switch (pick(rng, 0, 2)) {
        case 0:
          outputs = json::array();
          return "outputs emptied";
        case 1:
          if (outputs.is_array() && !outputs.empty()) outputs.push_back(outputs[0]);
          return "output repeated";
        default:
          outputs = json::array({names.empty() ? "x" : pick_from(rng, names)});
          return "output replaced";
      }
    }
    default: {  // dims rebound
      json& dims = document["dims"];
      if (!dims.is_object() || dims.empty()) {
        dims = json::object({{"batch", limit_number(rng)}});
        return "dims added";
      }
      auto it = dims.begin();
      std::advance(it, pick(rng, 0, static_cast<int64_t>(dims.size()) - 1));
      *it = pick(rng, 0, 2) == 0 ? limit_number(rng) : json(pick(rng, 0, 4096));
      return "dim " + it.key() + " = " + it->dump();
    }
  }
}

// Raw text damage: truncation, a flipped byte, or a stray character.
std::string damage_text(std::string text, Rng& rng, std::string& description) {
  if (text.empty()) return text;
  size_t at = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(text.size()) - 1));
  switch (pick(rng, 0, 2)) {
    case 0:
      description += "; truncated at " + std::to_string(at);
      return text.substr(0, at);
    case 1:
      text[at] = static_cast<char>(pick(rng, 0, 255));
      description += "; byte " + std::to_string(at) + " changed";
      return text;
    default:
      text.insert(at, 1, "{[\"\\,:0"[pick(rng, 0, 6)]);
      description += "; byte inserted at " + std::to_string(at);
      return text;
  }
}

long peak_rss_kib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// A coarse kind of a rejection: the message after its last "': " (past the
// names of the file, model, node and field), digits folded, cut to 60 bytes.
std::string rejection_kind(const std::string& message) {
  size_t last = message.rfind("': ");
  std::string tail = last == std::string::npos ? message : message.substr(last + 3);
  std::string kind;
  for (char c : tail) {
    if (kind.size() >= 60) break;
    bool digit = c >= '0' && c <= '9';
    if (digit && !kind.empty() && kind.back() == '#') continue;
    kind += digit ? '#' : c;
  }
  return kind;
}

}  // namespace

ModelMutant mutate_model(const std::string& base, uint64_t seed) {
  Rng rng(seed);
  ModelMutant mutant;
  json document = json::parse(base);
  int64_t count = pick(rng, 0, 4) < 3 ? 1 : pick(rng, 2, 3);
  for (int64_t i = 0; i < count; ++i) {
    mutant.description += (i ? "; " : "") + mutate_once(document, rng);
  }
  mutant.text = document.dump(pick(rng, 0, 1) ? -1 : 1, ' ', false, json::error_handler_t::replace);
  if (pick(rng, 0, 9) == 0) mutant.text = damage_text(mutant.text, rng, mutant.description);
  if (pick(rng, 0, 3) == 0)
    mutant.dims["batch"] = pick(rng, 0, 1) ? pick(rng, 1, 8) : pick(rng, 1, 1 << 20);
  const bool has_seq = base.find("\"seq\"") != std::string::npos;
  if (pick(rng, 0, 5) == 0 && (has_seq || pick(rng, 0, 5) == 0)) {
    mutant.dims["seq"] = pick(rng, 1, 256);
  }
  mutant.bf16 = pick(rng, 0, 4) == 0;
  mutant.cudagraphs = pick(rng, 0, 3) == 0;
  return mutant;
}

ModelCaseResult run_model_case(const ModelMutant& mutant, const std::string& scratch_dir) {
  ModelCaseResult result;
  const std::string path = scratch_dir + "/model_fuzz_case.json";
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << mutant.text;
  }
  try {
    cli::ModelSpec spec;
    spec.path = path;
    spec.dims = mutant.dims;
    spec.dtype = mutant.bf16 ? runtime::DType::kBF16 : runtime::DType::kF32;
    spec.device = runtime::kSimDevice;
    compiler::ir::Program program = cli::load_program(spec);
    const std::string backend = mutant.cudagraphs ? "cudagraphs" : "eager";
    compiler::backends::CompiledModel model =
        compiler::backends::compile(program, {.backend = backend});
    if (cli::estimate_work(model.program(), 2, false).seconds > kMaxRunSeconds) {
      result.outcome = ModelOutcome::kTooMuchWork;
      return result;
    }
    compiler::TensorList inputs = cli::random_inputs(model.program(), runtime::kSimDevice, 1);
    for (int call = 0; call < 2; ++call) {
      compiler::TensorList outputs = model(inputs);
      for (const runtime::Tensor& output : outputs) (void)output.to_doubles();
    }
    result.outcome = ModelOutcome::kRan;
  } catch (const Error& error) {
    result.outcome = ModelOutcome::kRejected;
    result.message = error.what();
  } catch (const std::exception& error) {
    result.outcome = ModelOutcome::kFailed;
    result.message =
        std::string("not a grove::Error: ") + typeid(error).name() + ": " + error.what();
  }
  cudagraph_trees::reset_tree_managers();
  runtime::device_context(runtime::kSimDevice).allocator().empty_cache();
  return result;
}

std::string ModelFuzzSummary::str() const {
  std::ostringstream out;
  out << cases << " mutants: " << ran << " ran, " << rejected << " rejected with grove::Error, "
      << too_much_work << " compiled only (too much work to run), " << failures.size()
      << " failed; peak RSS " << peak_rss_kib / 1024 << " MiB";
  return out.str();
}

ModelFuzzSummary fuzz_models(const ModelFuzzOptions& options) {
  GROVE_CHECK(!options.seed_models.empty(), "fuzz_models: no seed models");
  cudagraph_trees::backend::register_cudagraphs_backend();
  ModelFuzzSummary summary;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int64_t k = 0; k < options.max_cases && elapsed() < options.seconds; ++k) {
    const uint64_t seed = options.seed + static_cast<uint64_t>(k);
    const std::string& base =
        options.seed_models[static_cast<size_t>(seed % options.seed_models.size())];
    ModelMutant mutant = mutate_model(base, seed);
    if (options.progress) {
      // Before the case, so a crash's log names the mutant that caused it.
      *options.progress << "case seed " << seed << ": " << mutant.description.substr(0, 200)
                        << (mutant.bf16 ? " [bf16]" : "")
                        << (mutant.cudagraphs ? " [cudagraphs]" : "") << std::endl;
    }
    ModelCaseResult result = run_model_case(mutant, options.scratch_dir);
    ++summary.cases;
    switch (result.outcome) {
      case ModelOutcome::kRan:
        ++summary.ran;
        break;
      case ModelOutcome::kRejected:
        ++summary.rejected;
        ++summary.rejection_kinds[rejection_kind(result.message)];
        break;
      case ModelOutcome::kTooMuchWork:
        ++summary.too_much_work;
        break;
      case ModelOutcome::kFailed:
        summary.failures.push_back("seed " + std::to_string(seed) + " (" + mutant.description +
                                   "): " + result.message);
        break;
    }
    summary.peak_rss_kib = peak_rss_kib();
    if (summary.peak_rss_kib > options.max_rss_kib) {
      summary.failures.push_back("seed " + std::to_string(seed) + " (" + mutant.description +
                                 "): peak RSS " + std::to_string(summary.peak_rss_kib / 1024) +
                                 " MiB passed the bound of " +
                                 std::to_string(options.max_rss_kib / 1024) + " MiB");
      break;
    }
  }
  return summary;
}

}  // namespace grove::fuzz
