// `grove run` on models whose sizes are the attack (issue 24): each ends in a
// one-line error naming what was too large, quickly and with bounded memory.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

const char* const kGrove = "cli/grove";
const char* const kMlp = "benchmarks/models/mlp16x512.json";
constexpr long kMiB = 1024;  // in KiB, as ru_maxrss counts

std::string write_model(const std::string& name, const std::string& text) {
  std::string path = scratch_path(name);
  write_text(path, text);
  return path;
}

// Without an address-space limit a regression would try to take 16 GiB; with
// one it fails on bad_alloc instead. ASan reserves terabytes of address space,
// so the limit is left off under it.
long address_space_limit_kib() {
#if defined(__SANITIZE_ADDRESS__)
  return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return 0;
#else
  return 4 * 1024 * kMiB;
#endif
#else
  return 4 * 1024 * kMiB;
#endif
}

// Note [Parameters made in chunks] (compiler/backends/compile.cc): a 520-byte
// model with one unused 2^31-element f32 param took 11 GB of RSS with a 1 GiB
// sim device before any limit applied.
TEST(GroveLimits, HugeParameterFailsFastNamingItsBytesWithBoundedMemory) {
  std::string model = write_model("huge_param.json", R"({"name": "huge_param",
      "inputs": [{"name": "x", "shape": [4], "dtype": "f32"}],
      "params": [{"name": "huge", "shape": [2147483648], "dtype": "f32",
                  "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 1}}],
      "nodes": [{"name": "y", "op": "gelu", "inputs": ["x"]}], "outputs": ["y"]})");
  CommandResult result = run_command(
      kGrove, {"run", model, "--device", "sim", "--iters", "1", "--warmup", "1"},
      {.env = {"GROVE_SIM_MEMORY_BYTES=1073741824"}, .max_virtual_kib = address_space_limit_kib()});
  SCOPED_TRACE("stderr: " + result.err);
  EXPECT_EQ(result.status, 1);
  ASSERT_EQ(result.err_lines().size(), 1u);
  EXPECT_NE(result.err.find("param 'huge'"), std::string::npos);
  EXPECT_NE(result.err.find("8589934592 bytes"), std::string::npos);
  EXPECT_NE(result.err.find("1073741824"), std::string::npos);  // the device's limit
  EXPECT_GT(result.max_rss_kib, 0);
  EXPECT_LT(result.max_rss_kib, 300 * kMiB) << "peak RSS " << result.max_rss_kib << " KiB";
}

// Issue 24, item 6: an intermediate tensor the device cannot hold names the
// value, its node and its bytes (it was a bare out-of-memory message).
TEST(GroveLimits, IntermediateTensorTooLargeForTheDeviceNamesTheNode) {
  std::string model = write_model("big_activation.json", R"({"name": "big_activation",
      "inputs": [{"name": "x", "shape": [1, 65536], "dtype": "f32"}],
      "params": [{"name": "column", "shape": [8192, 1], "dtype": "f32", "init": {"kind": "ones"}}],
      "nodes": [{"name": "proj", "op": "add", "inputs": ["x", "column"]},
                {"name": "y", "op": "gelu", "inputs": ["proj"]}], "outputs": ["y", "proj"]})");
  CommandResult result =
      run_command(kGrove, {"run", model, "--device", "sim", "--iters", "1", "--warmup", "1"},
                  {.env = {"GROVE_SIM_MEMORY_BYTES=1073741824"}});
  SCOPED_TRACE("stderr: " + result.err);
  EXPECT_EQ(result.status, 1);
  ASSERT_EQ(result.err_lines().size(), 1u);
  EXPECT_NE(result.err.find("value 'proj'"), std::string::npos);
  EXPECT_NE(result.err.find("of node 'proj'"), std::string::npos);
  EXPECT_NE(result.err.find("2147483648 bytes"), std::string::npos);
}

// Issue 24, item 7: `--batch 1048576` of mlp16x512 was accepted and sat in
// "warm up (3 calls)" for what would be hours; now the estimate refuses it
// before anything is compiled, naming the way out.
TEST(GroveLimits, RunFarLongerThanAMinuteOnSimIsRefusedWithoutForce) {
  CommandResult result =
      run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "1048576"});
  SCOPED_TRACE("stdout: " + result.out + "\nstderr: " + result.err);
  EXPECT_EQ(result.status, 2);
  ASSERT_EQ(result.err_lines().size(), 1u);
  EXPECT_NE(result.err.find("far longer than a minute"), std::string::npos);
  EXPECT_NE(result.err.find("TFLOP per call x 23 calls"), std::string::npos);
  EXPECT_NE(result.err.find(" h on sim"), std::string::npos);
  EXPECT_NE(result.err.find("--force"), std::string::npos);
  EXPECT_EQ(result.out.find("warm up"), std::string::npos);
  EXPECT_LT(result.max_rss_kib, 300 * kMiB);
  // The same with --train, and --batch 65536 (still in warm-up after 90 s before).
  EXPECT_EQ(run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "65536"}).status, 2);
  EXPECT_EQ(
      run_command(kGrove, {"run", kMlp, "--device", "sim", "--batch", "16384", "--train"}).status,
      2);
}

// Issue 24, item 7: a phase of several calls that runs past two seconds says
// how far it got and how long is left.
TEST(GroveLimits, LongPhaseReportsCallsDoneAndTimeLeft) {
  // Progress from the first call on, so that the test does not depend on how
  // fast this machine runs the phase.
  CommandResult result = run_command(
      kGrove, {"run", kMlp, "--device", "sim", "--batch", "64", "--warmup", "1", "--iters", "8"},
      {.env = {"GROVE_PROGRESS_AFTER_S=0"}});
  SCOPED_TRACE("stdout: " + result.out + "\nstderr: " + result.err);
  ASSERT_EQ(result.status, 0);
  EXPECT_EQ(result.err, "");  // a short run: no warning
  EXPECT_NE(result.out.find("/8 calls, "), std::string::npos);
  EXPECT_NE(result.out.find(" left\n"), std::string::npos);
  // The phase's line is repeated with its time after the progress lines.
  size_t progress = result.out.find("/8 calls, ");
  size_t repeated = result.out.find("measure (8 calls) mlp16x512 (eager)", progress);
  EXPECT_NE(repeated, std::string::npos);
}

// Issue 24, items 6 and 10: the random input `grove run` makes was built on
// the host in full before the device refused it, and the error named nothing.
TEST(GroveLimits, InputTooLargeForTheDeviceNamesTheInput) {
  std::string model = write_model("wide_input.json", R"({"name": "wide_input",
      "inputs": [{"name": "tokens", "shape": [2147483648], "dtype": "f32"}],
      "nodes": [{"name": "y", "op": "gelu", "inputs": ["tokens"]}], "outputs": ["y"]})");
  CommandResult result = run_command(
      kGrove, {"run", model, "--device", "sim", "--iters", "1", "--warmup", "1"},
      {.env = {"GROVE_SIM_MEMORY_BYTES=1073741824"}, .max_virtual_kib = address_space_limit_kib()});
  SCOPED_TRACE("stderr: " + result.err);
  EXPECT_EQ(result.status, 1);
  ASSERT_EQ(result.err_lines().size(), 1u);
  EXPECT_NE(result.err.find("input 'tokens'"), std::string::npos);
  EXPECT_NE(result.err.find("8589934592 bytes"), std::string::npos);
  EXPECT_LT(result.max_rss_kib, 300 * kMiB);
}

// Issue 24, item 10: `"outputs": []` was run and timed without a word.
TEST(GroveLimits, ModelWithoutOutputsIsRunWithAWarning) {
  std::string model = write_model("no_outputs.json", R"({"name": "no_outputs",
      "inputs": [{"name": "x", "shape": [4], "dtype": "f32"}],
      "nodes": [{"name": "y", "op": "gelu", "inputs": ["x"]}], "outputs": []})");
  CommandResult result = run_command(kGrove, {"run", model, "--iters", "1", "--warmup", "1"});
  SCOPED_TRACE("stderr: " + result.err);
  EXPECT_EQ(result.status, 0);
  ASSERT_EQ(result.err_lines().size(), 1u);
  EXPECT_NE(result.err.find("grove: warning: model 'no_outputs' has no outputs"),
            std::string::npos);
}

}  // namespace
}  // namespace grove::cli::testing
