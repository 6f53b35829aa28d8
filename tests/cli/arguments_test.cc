// The `grove` command's argument parsing, and the output helpers it shares
// with the benchmarks (cli/common).
#include "cli/arguments.h"

#include <gtest/gtest.h>

#include "cli/common/latency.h"
#include "cli/common/table.h"

namespace grove::cli {
namespace {

const CommandSpec& spec() {
  static const CommandSpec command{
      "grove", "run", "MODEL", "s", "d", {{"--batch", "N", "batch"}, {"--train", "", "train"}}};
  return command;
}

TEST(ParseFlags, AcceptsSeparateAndInlineValuesAndSwitches) {
  ParsedFlags args = parse_flags(spec(), {"m.json", "--batch", "4", "--train"});
  EXPECT_EQ(args.positional(), std::vector<std::string>{"m.json"});
  EXPECT_EQ(args.value("--batch"), "4");
  EXPECT_TRUE(args.has("--train"));
  EXPECT_EQ(parse_flags(spec(), {"--batch=7"}).value("--batch"), "7");
  EXPECT_EQ(parse_flags(spec(), {}).value("--batch", "1"), "1");
  EXPECT_TRUE(parse_flags(spec(), {"-h"}).help_requested());
}

TEST(ParseFlags, RejectsUnknownRepeatedMissingAndMisusedFlags) {
  EXPECT_THROW(parse_flags(spec(), {"--bacth", "4"}), UsageError);
  EXPECT_THROW(parse_flags(spec(), {"--batch", "1", "--batch", "2"}), UsageError);
  EXPECT_THROW(parse_flags(spec(), {"--batch"}), UsageError);
  EXPECT_THROW(parse_flags(spec(), {"--batch="}), UsageError);
  EXPECT_THROW(parse_flags(spec(), {"--train=yes"}), UsageError);
  EXPECT_THROW(parse_flags(spec(), {"a.json", "b.json"}), UsageError);
}

TEST(ParsePositiveInt, AcceptsOnlyWholeNumbersInRange) {
  EXPECT_EQ(parse_positive_int("--n", "12"), 12);
  for (const char* bad : {"0", "-1", "1e3", "12x", "", " 3", "3000000000"}) {
    EXPECT_THROW(parse_positive_int("--n", bad), UsageError) << bad;
  }
  EXPECT_THROW(parse_positive_int("--n", "11", 10), UsageError);
}

TEST(ParseDeviceChoice, AcceptsAutoCudaSimWithOptionalIndex) {
  EXPECT_EQ(parse_device_choice("sim"), runtime::Device::parse("sim:0"));
  EXPECT_EQ(parse_device_choice("sim:0"), runtime::Device::parse("sim:0"));
  EXPECT_EQ(parse_device_choice("cuda:1"), runtime::Device::parse("cuda:1"));
  for (const char* bad : {"gpu", "cpu", "cuda:", "sim:a", "SIM"}) {
    EXPECT_THROW(parse_device_choice(bad), UsageError) << bad;
  }
}

TEST(HelpText, ListsEveryFlagWithItsValueName) {
  std::string text = help_text(spec());
  EXPECT_NE(text.find("usage: grove run MODEL [options]"), std::string::npos);
  EXPECT_NE(text.find("--batch N"), std::string::npos);
  EXPECT_NE(text.find("--train"), std::string::npos);
}

TEST(LatencySummary, MedianAndP90OfSeededSamples) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i * 1.5);  // 1.5 .. 150, reversed
  LatencySummary summary = summarize(samples);
  EXPECT_EQ(summary.count, 100u);
  EXPECT_DOUBLE_EQ(summary.min_us, 1.5);
  EXPECT_DOUBLE_EQ(summary.max_us, 150);
  EXPECT_DOUBLE_EQ(summary.median_us, 76.5);  // nearest rank of 49.5 rounds to 51st value
  EXPECT_DOUBLE_EQ(summary.p90_us, 135);
  EXPECT_NEAR(summary.spread(), (135 - 76.5) / 76.5, 1e-12);
  EXPECT_THROW(summarize({}), Error);
}

TEST(Table, AlignsColumnsAndRejectsRaggedRows) {
  Table table({{"case"}, {"us", Align::kRight}});
  table.add_row({"mlp b=1", "41.3"});
  table.add_row({"gpt", "1234.5"});
  EXPECT_EQ(table.render(),
            "case         us\n"
            "-------  ------\n"
            "mlp b=1    41.3\n"
            "gpt      1234.5\n");
  EXPECT_THROW(table.add_row({"only one"}), Error);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024 / 2), "1.50 MiB");
  EXPECT_EQ(format_ratio(3.066), "3.07x");
}

}  // namespace
}  // namespace grove::cli
