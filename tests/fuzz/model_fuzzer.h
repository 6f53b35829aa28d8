// Model-file fuzzer (issue 24): mutates valid model files (structure, numbers
// at the limits of their types, nesting depth, size, names, raw bytes) and
// loads, compiles and runs each mutant through the same steps as `grove run`
// on sim. Every mutant must end in success or a grove::Error: anything else
// (another exception, a signal, a sanitizer report) is a failure, and so is a
// peak RSS past the bound.
//
//   ModelFuzzOptions options;
//   options.seed_models = {read_text("benchmarks/models/mlp16x512.json")};
//   options.seconds = 30;
//   ModelFuzzSummary summary = fuzz_models(options);  // summary.failures empty
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace grove::fuzz {

struct ModelMutant {
  std::string text;                     // the model file
  std::string description;              // the mutations applied, for a failure report
  std::map<std::string, int64_t> dims;  // --batch / --seq as grove run would bind them
  bool bf16 = false;                    // --dtype bf16
  bool cudagraphs = false;              // --backend cudagraphs
};

// A mutant of `base` (a model JSON text), a pure function of `seed`.
ModelMutant mutate_model(const std::string& base, uint64_t seed);

enum class ModelOutcome { kRan, kRejected, kTooMuchWork, kFailed };

struct ModelCaseResult {
  ModelOutcome outcome = ModelOutcome::kFailed;
  std::string message;  // the grove::Error's message, or what went wrong
};

// Loads `mutant` from a file under `scratch_dir`, compiles it and runs it
// twice on sim with seeded random inputs (a mutant whose estimated work
// exceeds a second is compiled but not run: kTooMuchWork).
ModelCaseResult run_model_case(const ModelMutant& mutant, const std::string& scratch_dir);

struct ModelFuzzOptions {
  std::vector<std::string> seed_models;  // valid model texts to mutate
  uint64_t seed = 1;                     // of the first case; case k uses seed + k
  double seconds = 30;                   // stop after this long...
  int64_t max_cases = int64_t{1} << 40;  // ...or this many cases
  long max_rss_kib = 3L << 20;           // peak RSS bound of the process (3 GiB)
  std::string scratch_dir = "/tmp";
  std::ostream* progress = nullptr;  // one line per case when set
};

struct ModelFuzzSummary {
  int64_t cases = 0, ran = 0, rejected = 0, too_much_work = 0;
  long peak_rss_kib = 0;
  std::map<std::string, int64_t> rejection_kinds;  // first words of each message
  std::vector<std::string> failures;               // seed, mutations, what happened
  std::string str() const;
};

ModelFuzzSummary fuzz_models(const ModelFuzzOptions& options);

}  // namespace grove::fuzz
