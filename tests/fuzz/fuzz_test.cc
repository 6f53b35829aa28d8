// The differential fuzzer in CI: a bounded number of random programs and call
// sequences (and small training runs) on each device, "cudagraphs" bitwise
// equal to "eager" after every call (differential.h). The cuda instance skips
// without a device; the lead's longer runs use fuzz_main.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/tree_manager.h"
#include "tests/fuzz/differential.h"
#include "tests/fuzz/fuzz_driver.h"
#include "tests/fuzz/program_generator.h"
#include "tests/runtime/device_test_util.h"

namespace grove::fuzz {
namespace {

class DifferentialFuzz : public testing::DeviceTest {};

TEST_P(DifferentialFuzz, RandomProgramsAndCallSequencesMatchEagerBitwise) {
  FuzzOptions options;
  options.device = device();
  options.seed = testing::test_seed() % 100000;
  // 170 cases from the default seed; the fixed seeds and their regression
  // tests are listed in known_failures/README.md. Fed-back outputs reach
  // mutated and aliased inputs too (Note [Aliased inputs]).
  options.programs = 170;
  options.calls = 8;
  // Longer runs (the GPU bundle carries this test, not fuzz_main):
  // GROVE_FUZZ_SECONDS=600 GROVE_FUZZ_SEED=1 fuzz_test --gtest_filter='*cuda*'
  if (const char* seconds = std::getenv("GROVE_FUZZ_SECONDS")) {
    options.seconds = std::atof(seconds);
    options.programs = 1 << 30;
  }
  if (const char* seed = std::getenv("GROVE_FUZZ_SEED")) options.seed = std::strtoull(seed, nullptr, 10);
  options.progress = &std::cout;
  FuzzSummary summary = run_fuzz(options);
  RecordProperty("fuzz", summary.str());
  EXPECT_GT(summary.replays, summary.calls / 4) << summary.str();
  for (const std::string& failure : summary.failures) ADD_FAILURE() << failure;
}

// Reduced programs of fixed failures (known_failures/), each replayed with
// the call sequence of the scenario seed that failed.
TEST_P(DifferentialFuzz, ReducedProgramsOfFixedFailuresPass) {
  struct Saved {
    const char* file;
    uint64_t scenario_seed;
  };
  for (const Saved& saved : {Saved{"tests/fuzz/known_failures/seed_23188_views_of_copied_inputs.json",
                                   23188}}) {
    compiler::ir::Program program =
        compiler::model_format::load_model_file(saved.file, {}, device());
    DifferentialOutcome outcome = run_differential(program, saved.scenario_seed, 8);
    EXPECT_TRUE(outcome.passed) << saved.file << ": " << outcome.failure;
    EXPECT_GT(outcome.replays, 0) << saved.file;
  }
}

TEST_P(DifferentialFuzz, GeneratorIsDeterministicPerSeed) {
  for (uint64_t seed = 1; seed < 20; ++seed) {
    EXPECT_EQ(generate_program(seed, device()), generate_program(seed, device())) << seed;
  }
}

TEST_P(DifferentialFuzz, RewriteDropsOutputsAndDeadNodesAndStillVerifies) {
  compiler::ir::Program program = generate_program(7, device());
  compiler::ir::Program same = rewrite_program(program, {}, {});
  EXPECT_LE(same.nodes().size(), program.nodes().size());
  EXPECT_EQ(same.outputs().size(), program.outputs().size());
  if (program.outputs().size() > 1) {
    compiler::ir::Program fewer = rewrite_program(program, {0}, {});
    EXPECT_EQ(fewer.outputs().size(), program.outputs().size() - 1);
  }
  EXPECT_THROW(rewrite_program(program, {0, 1, 2, 3, 4, 5, 6, 7}, {}), Error);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(DifferentialFuzz);

}  // namespace
}  // namespace grove::fuzz
