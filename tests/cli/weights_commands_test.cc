// `grove export-weights` and `grove run --weights/--inputs/--save-outputs` on
// sim: exported weights reproduce the initializers' outputs bit for bit, and
// weights that do not fit the model are refused before compiling.
#include <gtest/gtest.h>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

const char* const kGrove = "cli/grove";
const char* const kMlp = "benchmarks/models/mlp16x512.json";
const char* const kGpt = "benchmarks/models/gpt4x256.json";

TEST(GroveWeights, ExportedWeightsReproduceTheInitializersOutputsBitwise) {
  const std::string weights = scratch_path("mlp.safetensors");
  CommandResult exported =
      run_command(kGrove, {"export-weights", kMlp, weights, "--device", "sim"});
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_NE(exported.out.find("wrote 32 tensors (16809984 bytes) of mlp16x512"), std::string::npos)
      << exported.out;

  const std::string plain = scratch_path("plain_out.safetensors");
  const std::string loaded = scratch_path("loaded_out.safetensors");
  CommandResult first = run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "2",
                                             "--iters", "1", "--save-outputs", plain});
  ASSERT_EQ(first.status, 0) << first.err;
  CommandResult second = run_command(
      kGrove, {"run", kMlp, "--device", "sim", "--batch", "2", "--iters", "1", "--backend",
               "cudagraphs", "--weights", weights, "--save-outputs", loaded});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.out.find("32 tensors, 16.0 MiB"), std::string::npos) << second.out;
  std::string a = read_text(plain), b = read_text(loaded);
  EXPECT_GT(a.size(), 2u * 512 * 4);
  EXPECT_EQ(a, b) << "the same weights and inputs must give the same bytes";

  // The saved outputs feed a run as its inputs only where names match: the
  // output is 'gelu15', the model's input is 'x'.
  CommandResult wrong_inputs = run_command(
      kGrove, {"run", kMlp, "--device", "sim", "--batch", "2", "--iters", "1", "--inputs", plain});
  EXPECT_EQ(wrong_inputs.status, 1);
  EXPECT_NE(wrong_inputs.err.find("has no tensor 'x'"), std::string::npos) << wrong_inputs.err;
}

TEST(GroveWeights, WeightsOfAnotherModelAreRefusedNamingTheTensor) {
  const std::string weights = scratch_path("mlp_for_gpt.safetensors");
  ASSERT_EQ(run_command(kGrove, {"export-weights", kMlp, weights, "--device", "sim"}).status, 0);
  CommandResult result = run_command(
      kGrove, {"run", kGpt, "--device", "sim", "--seq", "8", "--iters", "1", "--weights", weights});
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("lacks tensor"), std::string::npos) << result.err;
  // Refused before compiling: no compile line was printed.
  EXPECT_EQ(result.out.find("compile"), std::string::npos) << result.out;
}

TEST(GroveWeights, BadCommandLinesNameTheMistake) {
  const std::string truncated = scratch_path("truncated.safetensors");
  write_text(truncated, "abc");
  CommandResult bad_file =
      run_command(kGrove, {"run", kMlp, "--device", "sim", "--weights", truncated});
  EXPECT_EQ(bad_file.status, 1);
  EXPECT_NE(bad_file.err.find("is truncated: 3 bytes"), std::string::npos) << bad_file.err;

  CommandResult one_argument = run_command(kGrove, {"export-weights", kMlp});
  EXPECT_EQ(one_argument.status, 2);
  EXPECT_NE(one_argument.err.find("expected MODEL.json OUT.safetensors"), std::string::npos);

  CommandResult over_model = run_command(kGrove, {"run", kMlp, "--device", "sim", "--weights",
                                                  truncated, "--save-outputs", truncated});
  EXPECT_EQ(over_model.status, 2);
  EXPECT_NE(over_model.err.find("is --weights itself"), std::string::npos) << over_model.err;

  CommandResult train = run_command(kGrove, {"run", kMlp, "--train", "--weights", truncated});
  EXPECT_EQ(train.status, 2);
  EXPECT_NE(train.err.find("--weights is for inference"), std::string::npos) << train.err;
}

}  // namespace
}  // namespace grove::cli::testing
