// `grove demo` on sim: finishes, compares the backends bit for bit, and
// reports the tree.
#include <gtest/gtest.h>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

TEST(GroveDemo, RunsBothBackendsOnSimWithIdenticalResults) {
  CommandResult result =
      run_command("tests/cli/grove_with_stand_in",
                  {"demo", "--device", "sim", "--iters", "3", "--train-steps", "2"});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  const std::string& out = result.out;
  EXPECT_NE(out.find("grove demo: gpt4x256 on sim:0"), std::string::npos) << out;
  EXPECT_NE(out.find("cudagraphs outputs: bitwise identical to eager"), std::string::npos) << out;
  EXPECT_NE(out.find("== training"), std::string::npos);
  EXPECT_NE(out.find("tree of CUDA graphs after inference"), std::string::npos);
  EXPECT_NE(out.find("compile gpt4x256 (cudagraphs)"), std::string::npos);
  EXPECT_NE(out.find("demo finished"), std::string::npos);
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos);
}

TEST(GroveDemo, DefaultBuildRunsAndSaysWhatItRan) {
  CommandResult result =
      run_command("cli/grove", {"demo", "--device", "sim", "--iters", "2", "--train-steps", "1"});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  bool eager_only =
      result.out.find("not registered in this build; running eager only") != std::string::npos;
  bool compared = result.out.find("bitwise identical to eager") != std::string::npos;
  EXPECT_TRUE(eager_only != compared) << result.out;
}

}  // namespace
}  // namespace grove::cli::testing
