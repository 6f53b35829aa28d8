// `grove demo` on sim: finishes, compares the backends bit for bit, and
// reports the tree.
#include <gtest/gtest.h>

#include <regex>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

// The grove binary links the cudagraphs backend: the demo must run it, compare
// it with eager bit for bit, and print what its tree did.
TEST(GroveDemo, RunsBothBackendsOnSimWithIdenticalResults) {
  CommandResult result =
      run_command("cli/grove", {"demo", "--device", "sim", "--iters", "3", "--train-steps", "2"});
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  const std::string& out = result.out;
  EXPECT_NE(out.find("grove demo: gpt4x256 on sim:0"), std::string::npos) << out;
  EXPECT_NE(out.find("cudagraphs outputs: bitwise identical to eager"), std::string::npos) << out;
  EXPECT_NE(out.find("cudagraphs losses, params, gradients and optimizer state: bitwise identical "
                     "to eager"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("== training"), std::string::npos);
  EXPECT_NE(out.find("tree of CUDA graphs after inference"), std::string::npos);
  EXPECT_NE(out.find("tree of CUDA graphs after training"), std::string::npos);
  EXPECT_NE(out.find("compile gpt4x256 (cudagraphs)"), std::string::npos);
  EXPECT_NE(out.find("demo finished"), std::string::npos);
  EXPECT_NE(out.find("cudagraphs matches eager bit for bit"), std::string::npos) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos);
  EXPECT_EQ(out.find("not registered"), std::string::npos) << out;
  // The tree recorded and replayed: its stats rows are present and non-zero.
  std::smatch replays;
  ASSERT_TRUE(std::regex_search(out, replays, std::regex("\nreplays +([0-9]+)\n"))) << out;
  EXPECT_GT(std::stoll(replays[1].str()), 0) << out;
  std::smatch recordings;
  ASSERT_TRUE(std::regex_search(out, recordings, std::regex("\nrecordings +([0-9]+)\n"))) << out;
  EXPECT_GT(std::stoll(recordings[1].str()), 0) << out;
}

}  // namespace
}  // namespace grove::cli::testing
