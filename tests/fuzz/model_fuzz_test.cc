// The model-file fuzzer in CI (model_fuzzer.h): mutants of the benchmark
// models and of small models covering every kind of node field, for a bounded
// time on sim. Every mutant ends in success or a grove::Error, with the
// process's peak RSS bounded. tools/sanitize.sh model-fuzz runs it longer under
// AddressSanitizer (GROVE_MODEL_FUZZ_SECONDS=600).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/common/test_util.h"
#include "tests/fuzz/model_fuzzer.h"

namespace grove::fuzz {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Small seeds reach more of the loader per second than the benchmark models.
const char* const kSmallModels[] = {
    R"({"name": "small_mlp", "dims": {"batch": 2},
        "inputs": [{"name": "x", "shape": ["batch", 8], "dtype": "f32"}],
        "params": [{"name": "w", "shape": [4, 8], "dtype": "f32",
                    "init": {"kind": "normal", "mean": 0, "std": 0.5, "seed": 3}},
                   {"name": "b", "shape": [4], "dtype": "f32",
                    "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 4}}],
        "buffers": [{"name": "steps", "shape": [], "dtype": "f32", "init": {"kind": "zeros"}}],
        "nodes": [{"name": "fc", "op": "linear", "inputs": ["x", "w", "b"]},
                  {"name": "act", "op": "gelu", "inputs": ["fc"]},
                  {"name": "total", "op": "sum", "inputs": ["act"], "attrs": {"dims": [1]}},
                  {"name": "one", "op": "full", "inputs": [], "attrs": {"value": 1.0}},
                  {"name": "next", "op": "add", "inputs": ["steps", "one"]},
                  {"name": "count", "op": "copy_into", "inputs": ["steps", "next"]}],
        "outputs": ["act", "total", "count"]})",
    R"({"name": "shapes", "dims": {"batch": 2, "seq": 4},
        "inputs": [{"name": "ids", "shape": ["batch", "seq"], "dtype": "i64"},
                   {"name": "x", "shape": ["batch", "seq", 6], "dtype": "f32"}],
        "params": [{"name": "table", "shape": [10, 6], "dtype": "f32",
                    "init": {"kind": "normal", "std": 0.02, "seed": 1}},
                   {"name": "g", "shape": [6], "dtype": "f32", "init": {"kind": "ones"}},
                   {"name": "z", "shape": [6], "dtype": "f32", "init": {"kind": "zeros"}}],
        "buffers": [{"name": "mask", "shape": ["seq", "seq"], "dtype": "bool",
                     "init": {"kind": "tril"}}],
        "nodes": [{"name": "emb", "op": "embedding", "inputs": ["table", "ids"]},
                  {"name": "h", "op": "add", "inputs": ["emb", "x"]},
                  {"name": "n", "op": "layer_norm", "inputs": ["h", "g", "z"],
                   "attrs": {"eps": 1e-05}},
                  {"name": "r", "op": "reshape", "inputs": ["n"], "attrs": {"shape": ["batch", "seq", 2, 3]}},
                  {"name": "p", "op": "permute", "inputs": ["r"], "attrs": {"order": [0, 2, 1, 3]}},
                  {"name": "s", "op": "slice", "inputs": ["n"], "attrs": {"dim": 2, "start": 0, "end": 4}},
                  {"name": "t", "op": "transpose", "inputs": ["s"], "attrs": {"dim0": 1, "dim1": 2}},
                  {"name": "scores", "op": "matmul", "inputs": ["s", "t"]},
                  {"name": "fill", "op": "full", "inputs": [], "attrs": {"value": -1e9}},
                  {"name": "masked", "op": "where", "inputs": ["mask", "scores", "fill"]},
                  {"name": "probs", "op": "softmax", "inputs": ["masked"], "attrs": {"dim": -1}},
                  {"name": "m", "op": "max", "inputs": ["probs"], "attrs": {"dims": [-1], "keepdim": 1}},
                  {"name": "c", "op": "concat", "inputs": ["probs", "m"], "attrs": {"dim": 2}}],
        "outputs": ["p", "c"]})",
};

TEST(ModelFuzz, MutatedModelsEndInSuccessOrAGroveErrorWithBoundedMemory) {
  // A small sim device, so that mutants asking for much memory are refused
  // quickly (set before anything touches the device).
  setenv("GROVE_SIM_MEMORY_BYTES", "268435456", 1);
  ModelFuzzOptions options;
  options.seed_models = {read_file("benchmarks/models/mlp16x512.json"),
                         read_file("benchmarks/models/gpt4x256.json")};
  for (const char* model : kSmallModels) {
    options.seed_models.push_back(model);
    options.seed_models.push_back(model);  // twice: small seeds are cheap
  }
  for (const std::string& model : options.seed_models) ASSERT_FALSE(model.empty());
  options.seed = testing::test_seed() % 1000000;
  options.seconds = 40;
  if (const char* seconds = std::getenv("GROVE_MODEL_FUZZ_SECONDS")) {
    options.seconds = std::atof(seconds);
  }
  if (const char* seed = std::getenv("GROVE_MODEL_FUZZ_SEED")) {
    options.seed = std::strtoull(seed, nullptr, 10);
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.scratch_dir = tmp != nullptr ? tmp : "/tmp";
  options.progress = &std::cout;
  ModelFuzzSummary summary = fuzz_models(options);
  std::cout << summary.str() << "\nrejections by kind:\n";
  for (const auto& [kind, count] : summary.rejection_kinds) {
    std::cout << "  " << count << "  " << kind << "\n";
  }
  RecordProperty("model_fuzz", summary.str());
  for (const std::string& failure : summary.failures) ADD_FAILURE() << failure;
  // The mutants reach past the loader: some run, many are rejected.
  EXPECT_GT(summary.cases, 20) << summary.str();
  EXPECT_GT(summary.ran, 0) << summary.str();
  EXPECT_GT(summary.rejected, 0) << summary.str();
}

// The mutator is a pure function of its seed (a failure's seed reproduces it).
TEST(ModelFuzz, MutantsAreAFunctionOfTheSeed) {
  for (uint64_t seed = 1; seed < 40; ++seed) {
    ModelMutant a = mutate_model(kSmallModels[0], seed);
    ModelMutant b = mutate_model(kSmallModels[0], seed);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.description, b.description);
    EXPECT_NE(a.text, kSmallModels[0]);
  }
}

}  // namespace
}  // namespace grove::fuzz
