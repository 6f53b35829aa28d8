// TextStream over a toy vocabulary (Note [Stop strings over detokenized
// text]): released text is what the tokens spell, never holds a stop string,
// is never taken back, and waits while it could still become one or is half
// a UTF-8 character.
#include "serving/llm/text_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace grove::serving::llm {
namespace {

// Token i spells kPieces[i].
const std::vector<std::string> kPieces = {"a",  "b",  "c", " ",        "\n",
                                          "xy", "ab", "$", "\xE2\x82", "\xAC" /* € split */};

std::string spell(std::span<const int64_t> ids) {
  std::string text;
  for (int64_t id : ids) text += kPieces[static_cast<size_t>(id)];
  return text;
}

std::string run(TextStream& stream, const std::vector<int64_t>& tokens, bool* stopped = nullptr) {
  std::string text;
  for (int64_t token : tokens) {
    TextStream::Step step = stream.add(token);
    text += step.released;
    if (step.stopped) {
      if (stopped) *stopped = true;
      return text;
    }
  }
  if (stopped) *stopped = false;
  return text + stream.finish();
}

TEST(TextStream, WithoutStopStringsReleasesWhatTheTokensSpell) {
  TextStream stream(spell, {}, {});
  EXPECT_EQ(stream.add(0).released, "a");
  EXPECT_EQ(stream.add(5).released, "xy");
  EXPECT_EQ(stream.add(3).released, " ");
  EXPECT_EQ(stream.finish(), "");
  EXPECT_EQ(stream.released(), "axy ");
}

TEST(TextStream, StopStringAcrossTokensEndsBeforeIt) {
  TextStream stream(spell, {}, {"bc"});
  bool stopped = false;
  // "a" "ab" "c" "xy": the text "aabcxy" holds "bc" spelled by "ab" + "c".
  EXPECT_EQ(run(stream, {0, 6, 2, 5}, &stopped), "aa");
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(stream.add(0).released.empty());  // nothing after a stop
}

TEST(TextStream, HoldsBackAPossibleStartOfAStopString) {
  TextStream stream(spell, {}, {"abc"});
  EXPECT_EQ(stream.add(3).released, " ");
  EXPECT_EQ(stream.add(0).released, "");    // "a" may start "abc"
  EXPECT_EQ(stream.add(1).released, "");    // "ab" too
  EXPECT_EQ(stream.add(0).released, "ab");  // "aba": "ab" cannot, the last "a" still may
  EXPECT_EQ(stream.finish(), "a");          // the end: nothing can follow
  EXPECT_EQ(stream.released(), " aba");
}

TEST(TextStream, HalfAUtf8CharacterWaitsForItsOtherHalf) {
  TextStream stream(spell, {}, {});
  EXPECT_EQ(stream.add(7).released, "$");
  EXPECT_EQ(stream.add(8).released, "");  // E2 82: two bytes of three
  EXPECT_EQ(stream.add(9).released, "\xE2\x82\xAC");
  EXPECT_EQ(complete_utf8_prefix("x\xEF\xBF\xBD"), 1u);  // a trailing U+FFFD waits
  EXPECT_EQ(complete_utf8_prefix("\xC3\xA9"), 2u);
  EXPECT_EQ(complete_utf8_prefix("e\xC3"), 1u);
}

TEST(TextStream, PromptTailTextIsNotReleased) {
  TextStream stream(spell, {5, 3}, {});  // the prompt ended in "xy "
  EXPECT_EQ(stream.add(0).released, "a");
  EXPECT_EQ(stream.released(), "a");
}

TEST(TextStream, RandomTokensMatchTheTextCutAtTheFirstStop) {
  const uint64_t seed = 3838;
  std::mt19937_64 random(seed);
  const std::vector<std::string> stops = {"ba", "\n\n", "xyc"};
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int64_t> tokens(1 + random() % 12);
    for (int64_t& token : tokens) token = static_cast<int64_t>(random() % 8);
    const std::string whole = spell(tokens);
    size_t first = std::string::npos;
    for (const std::string& stop : stops) first = std::min(first, whole.find(stop));
    // The tokens up to the one that completes the first stop string.
    TextStream stream(spell, {}, stops);
    bool stopped = false;
    const std::string text = run(stream, tokens, &stopped);
    EXPECT_EQ(stopped, first != std::string::npos) << "seed " << seed << " trial " << trial;
    EXPECT_EQ(text, whole.substr(0, first)) << "seed " << seed << " trial " << trial;
    for (const std::string& stop : stops) EXPECT_EQ(text.find(stop), std::string::npos);
  }
}

}  // namespace
}  // namespace grove::serving::llm
