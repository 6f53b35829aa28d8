// `grove` help output and every error path: each error is one line
// "grove: error: ..." on stderr and a non-zero exit status.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

const char* const kGrove = "cli/grove";
const char* const kMlp = "benchmarks/models/mlp16x512.json";

// Checks the one-line error contract and that the message mentions `expected`.
void expect_error(const std::vector<std::string>& args, const std::string& expected,
                  int status = 0) {
  CommandResult result = run_command(kGrove, args);
  std::string command = "grove";
  for (const auto& arg : args) command += " " + arg;
  SCOPED_TRACE(command + "\nstdout: " + result.out + "\nstderr: " + result.err);
  EXPECT_NE(result.status, 0);
  if (status != 0) {
    EXPECT_EQ(result.status, status);
  }
  std::vector<std::string> lines = result.err_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("grove: error: ", 0), 0u);
  EXPECT_NE(lines[0].find(expected), std::string::npos);
}

TEST(GroveHelp, TopLevelHelpListsEveryCommandAndExitsZero) {
  for (const char* flag : {"--help", "help", "-h"}) {
    CommandResult result = run_command(kGrove, {flag});
    EXPECT_EQ(result.status, 0) << flag;
    EXPECT_NE(result.out.find("usage: grove <command>"), std::string::npos);
    for (const char* command : {"run MODEL.json", "demo", "help"}) {
      EXPECT_NE(result.out.find(std::string("  ") + command), std::string::npos) << command;
    }
    EXPECT_TRUE(result.err.empty());
  }
}

TEST(GroveHelp, NoArgumentsPrintsUsageToStderrAndFails) {
  CommandResult result = run_command(kGrove, {});
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("usage: grove <command>"), std::string::npos);
}

TEST(GroveHelp, RunHelpDocumentsEveryFlag) {
  CommandResult result = run_command(kGrove, {"run", "--help"});
  EXPECT_EQ(result.status, 0);
  for (const char* flag : {"--backend", "--device", "--batch", "--seq", "--dtype", "--iters",
                           "--train", "--stats-json", "--dot"}) {
    EXPECT_NE(result.out.find(std::string("  ") + flag + " "), std::string::npos) << flag;
  }
  EXPECT_EQ(run_command(kGrove, {"help", "run"}).out, result.out);
}

TEST(GroveHelp, DemoHelpDescribesTheDemo) {
  CommandResult result = run_command(kGrove, {"demo", "--help"});
  EXPECT_EQ(result.status, 0);
  EXPECT_NE(result.out.find("usage: grove demo"), std::string::npos);
  EXPECT_NE(result.out.find("--device"), std::string::npos);
  EXPECT_EQ(run_command(kGrove, {"help", "demo"}).out, result.out);
}

TEST(GroveErrors, UnknownCommand) {
  expect_error({"frobnicate"}, "unknown command 'frobnicate'", 2);
}

TEST(GroveErrors, UnknownHelpTopic) { expect_error({"help", "frobnicate"}, "unknown command", 2); }

TEST(GroveErrors, UnknownFlagNamesTheFlagAndListsTheValidOnes) {
  expect_error({"run", kMlp, "--fast"}, "unknown option '--fast'", 2);
  expect_error({"run", kMlp, "--fast"}, "--backend");
  expect_error({"demo", "--batch", "2"}, "unknown option '--batch'", 2);
}

TEST(GroveErrors, MissingModelArgument) { expect_error({"run"}, "missing the model file", 2); }

TEST(GroveErrors, FlagWithoutValue) { expect_error({"run", kMlp, "--iters"}, "needs a value", 2); }

TEST(GroveErrors, MissingModelFile) {
  expect_error({"run", scratch_path("no_such_model.json")}, "cannot open model file");
}

TEST(GroveErrors, MalformedModelNamesTheNodeAndField) {
  const std::string path = scratch_path("malformed.json");
  write_text(path, R"({"name": "broken", "inputs": [], "nodes": [{"name": "n0", "op": "frob",
                       "inputs": []}], "outputs": ["n0"]})");
  expect_error({"run", path}, "frob");
  const std::string not_json = scratch_path("not_json.json");
  write_text(not_json, "{\"name\": \n");
  expect_error({"run", not_json}, "does not parse");
}

TEST(GroveErrors, BadDevice) {
  expect_error({"run", kMlp, "--device", "tpu"}, "--device expects auto, cuda or sim", 2);
  expect_error({"demo", "--device", "sim:x"}, "--device expects", 2);
}

TEST(GroveErrors, BadBatch) {
  for (const char* batch : {"0", "-3", "two", "1.5", "99999999999"}) {
    expect_error({"run", kMlp, "--batch", batch}, "--batch expects an integer", 2);
  }
}

TEST(GroveErrors, DimensionTheModelDoesNotDeclare) {
  expect_error({"run", kMlp, "--seq", "4"}, "has no dimension 'seq'", 2);
}

TEST(GroveErrors, BadDtypeAndBackend) {
  expect_error({"run", kMlp, "--dtype", "f64"}, "--dtype expects f32 or bf16", 2);
  expect_error({"run", kMlp, "--backend", "turbo"}, "unknown backend 'turbo'", 2);
}

TEST(GroveErrors, DotNeedsTheGraphBackend) {
  expect_error({"run", kMlp, "--dot", scratch_path("tree.dot")}, "--backend cudagraphs", 2);
}

// Issue 24, item 8: output paths are checked before the run, and a failed
// write is an error, never "wrote".
TEST(GroveErrors, OutputPathsAreCheckedBeforeTheRun) {
  expect_error({"run", kMlp, "--stats-json", kMlp}, "is the model file itself", 2);
  std::string both = scratch_path("both.out");
  expect_error({"run", kMlp, "--backend", "cudagraphs", "--stats-json", both, "--dot", both},
               "give each its own file", 2);
  expect_error({"run", kMlp, "--stats-json", scratch_path("no_such_dir/stats.json")},
               "does not exist; create it first");
  expect_error({"run", kMlp, "--stats-json", scratch_path("")}, "is a directory");
}

TEST(GroveErrors, AFailedWriteIsAnError) {
  CommandResult result = run_command(
      kGrove, {"run", kMlp, "--backend", "cudagraphs", "--iters", "2", "--dot", "/dev/full"});
  SCOPED_TRACE("stdout: " + result.out + "\nstderr: " + result.err);
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.err.find("writing '/dev/full' failed"), std::string::npos);
  EXPECT_EQ(result.out.find("wrote the tree's DOT"), std::string::npos);
}

// Issue 24, items 1, 5 and 10: a deep document with --dtype bf16 (which
// rewrites the JSON) is rejected while parsing, not by a stack overflow in
// dump(); directories and devices are refused before anything is read.
TEST(GroveErrors, DeepModelWithDtypeIsRejected) {
  std::string deep = scratch_path("deep.json");
  {
    std::ofstream file(deep);
    file << "{\"name\": \"deep\", \"x\": " << std::string(100000, '[') << std::string(100000, ']')
         << "}";
  }
  expect_error({"run", deep, "--dtype", "bf16"}, "nests deeper than 16 levels");
}

// Found by the model fuzzer (issue 24): the --dtype rewrite read a dtype that
// is not a string with nlohmann's value(), whose type_error reached the user.
TEST(GroveErrors, DtypeThatIsNotAStringWithBf16IsNamed) {
  std::string model = scratch_path("object_dtype.json");
  {
    std::ofstream file(model);
    file << R"({"name": "m", "inputs": [{"name": "x", "shape": [2], "dtype": {}}],
               "nodes": [{"name": "y", "op": "gelu", "inputs": ["x"]}], "outputs": ["y"]})";
  }
  expect_error({"run", model, "--dtype", "bf16"}, "field 'dtype'");
}

TEST(GroveErrors, ModelPathThatIsNotARegularFile) {
  expect_error({"run", scratch_path("")}, "is a directory");
  expect_error({"run", "/dev/zero"}, "is not a regular file");
}

// Issue 24, item 10: escape bytes from a model reached the terminal raw.
TEST(GroveErrors, ControlBytesFromAModelAreEscaped) {
  std::string model = scratch_path("escape.json");
  {
    std::ofstream file(model);
    file << R"({"name": "m\u001b[2J", "inputs": [{"name": "x", "shape": [2]}],
               "nodes": [{"name": "y", "op": "gelo", "inputs": ["x"]}], "outputs": ["y"]})";
  }
  CommandResult result = run_command(kGrove, {"run", model});
  EXPECT_NE(result.status, 0);
  EXPECT_EQ(result.err.find('\x1b'), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("m\\x1b[2J"), std::string::npos) << result.err;
}

TEST(GroveErrors, RepeatedFlag) {
  expect_error({"run", kMlp, "--batch", "2", "--batch", "3"}, "given twice", 2);
}

}  // namespace
}  // namespace grove::cli::testing
