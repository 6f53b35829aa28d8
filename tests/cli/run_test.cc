// `grove run` on sim: both backends on mlp16x512 at a small batch, training,
// and the files --stats-json and --dot write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

// The grove binary links the cudagraphs backend (//cli:cli_lib).
const char* const kGrove = "cli/grove";
const char* const kMlp = "benchmarks/models/mlp16x512.json";

// The value column of the table row starting with `metric`.
std::string row_value(const std::string& out, const std::string& metric) {
  std::smatch match;
  std::regex row("(^|\n)" + metric + "  +([^\n]*)");
  return std::regex_search(out, match, row) ? match[2].str() : "<no row '" + metric + "'>";
}

// Found by the model fuzzer: --dtype bf16 left gpt4x256's `full` constants in
// f32, and its attention scale then met bf16 scores ("must have the same dtype").
TEST(GroveRun, Gpt4x256RunsAndTrainsInBf16) {
  for (bool train : {false, true}) {
    std::vector<std::string> args = {
        "run", "benchmarks/models/gpt4x256.json", "--device", "sim", "--dtype", "bf16", "--iters",
        "1"};
    if (train) args.push_back("--train");
    CommandResult result = run_command(kGrove, args);
    ASSERT_EQ(result.status, 0) << result.out << result.err;
    if (!train) EXPECT_EQ(row_value(result.out, "outputs"), "bf16[1, 32, 512]");
  }
}

TEST(GroveRun, EagerOnSimPrintsLatencyAndLaunchesPerCall) {
  const std::string stats = scratch_path("eager_stats.json");
  CommandResult result = run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "3",
                                              "--iters", "4", "--stats-json", stats});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("mlp16x512 on sim:0"), std::string::npos) << result.out;
  // 16 x (linear + gelu): 16 GEMMs whose epilogues add the bias and apply
  // the gelu, so no generated kernel runs (GROVE_GEMM_EPILOGUES=0 would give 16).
  EXPECT_EQ(row_value(result.out, "GEMMs per call"), "16") << result.out;
  EXPECT_EQ(row_value(result.out, "kernels per call"), "0") << result.out;
  EXPECT_EQ(row_value(result.out, "timed calls"), "4");
  EXPECT_EQ(row_value(result.out, "outputs"), "f32[3, 512]");
  // Printed in us below 10 ms and in ms above: either unit, never empty.
  const std::string median = row_value(result.out, "latency per call, median");
  EXPECT_TRUE(median.find(" ms") != std::string::npos || median.find(" us") != std::string::npos)
      << median;
  nlohmann::json json = nlohmann::json::parse(read_text(stats));
  EXPECT_EQ(json["device"], "sim:0");
  EXPECT_EQ(json["dims"]["batch"], 3);
  EXPECT_EQ(json["measurement"]["backend"], "eager");
  EXPECT_EQ(json["measurement"]["latency"]["count"], 4);
  EXPECT_GT(json["measurement"]["latency"]["median_us"].get<double>(), 0);
  EXPECT_LE(json["measurement"]["latency"]["median_us"].get<double>(),
            json["measurement"]["latency"]["p90_us"].get<double>());
  EXPECT_TRUE(json["tree"].is_null());
}

TEST(GroveRun, CudagraphsOnSimReplaysOneGraphPerCall) {
  const std::string stats = scratch_path("graph_stats.json");
  const std::string dot = scratch_path("tree.dot");
  CommandResult result =
      run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "2", "--backend",
                           "cudagraphs", "--iters", "5", "--stats-json", stats, "--dot", dot});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(row_value(result.out, "graph launches per call"), "1.00") << result.out;
  EXPECT_EQ(row_value(result.out, "eager segment runs per call"), "0.00");
  EXPECT_EQ(row_value(result.out, "recordings while timed"), "0");
  EXPECT_EQ(row_value(result.out, "recordings"), "1");
  EXPECT_NE(result.out.find("pool reserved"), std::string::npos);
  nlohmann::json json = nlohmann::json::parse(read_text(stats));
  EXPECT_EQ(json["measurement"]["backend"], "cudagraphs");
  EXPECT_EQ(json["measurement"]["timed_tree_activity"]["replays"], 5);
  EXPECT_EQ(json["tree"]["recordings"], 1);
  EXPECT_GE(json["tree"]["replays"].get<int>(), 5);
  EXPECT_GT(json["tree"]["pool"]["reserved_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(read_text(dot).rfind("digraph", 0), 0u) << read_text(dot);
}

TEST(GroveRun, CudagraphsIsInTheBuildAndReplaysWhileTimed) {
  CommandResult result = run_command(
      kGrove, {"run", kMlp, "--device", "sim", "--backend", "cudagraphs", "--iters", "2"});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(row_value(result.out, "graph launches per call"), "1.00") << result.out;
  EXPECT_EQ(row_value(result.out, "recordings while timed"), "0") << result.out;
  EXPECT_NE(result.out.find("tree of CUDA graphs (totals)"), std::string::npos) << result.out;
  EXPECT_GT(std::stoll(row_value(result.out, "replays")), 0) << result.out;
  EXPECT_TRUE(result.err.empty()) << result.err;
}

TEST(GroveRun, TrainingOnSimLowersTheLoss) {
  const std::string stats = scratch_path("train_stats.json");
  CommandResult result = run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "4",
                                              "--train", "--iters", "4", "--stats-json", stats});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("loss (mean squared error)"), std::string::npos) << result.out;
  EXPECT_EQ(row_value(result.out, "timed steps"), "4");
  nlohmann::json json = nlohmann::json::parse(read_text(stats));
  std::vector<double> losses = json["measurement"]["losses"];
  ASSERT_EQ(losses.size(), 7u);  // 3 warm-up steps + 4 timed
  EXPECT_LT(losses.back(), losses.front());
}

}  // namespace
}  // namespace grove::cli::testing
