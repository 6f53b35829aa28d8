// Reading a completion body (Note [Bounded request bodies]): what a hostile
// client may send is refused as a CompletionError (a 400) naming what was
// wrong, never by recursion, a tree of millions of nodes, or a message that
// carries the client's bytes.
#include "serving/llm/completion_request.h"

#include <gtest/gtest.h>

#include <string>

namespace grove::serving::llm {
namespace {

// The CompletionError parse_json_object throws for `body`, or "" if none.
std::string refusal(const std::string& body, size_t max_values = most_body_values(32)) {
  try {
    parse_json_object(body, max_values);
  } catch (const CompletionError& error) {
    return error.what();
  }
  return "";
}

TEST(CompletionRequest, DeepNestingIsRefusedWithoutRecursion) {
  // 100000 levels crashed the server (a stack overflow in the parser).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(refusal(deep).find("nests deeper than 16 levels"), std::string::npos) << refusal(deep);
  std::string keyed;
  for (int i = 0; i < 100000; ++i) keyed += R"({"a":)";
  keyed += "1" + std::string(100000, '}');
  EXPECT_NE(refusal(keyed).find("nests deeper"), std::string::npos) << refusal(keyed);
  // Sixteen levels are a request's to use.
  std::string fifteen = R"({"a":)" + std::string(15, '[') + std::string(15, ']') + "}";
  EXPECT_EQ(refusal(fifteen), "");
}

TEST(CompletionRequest, MoreValuesThanAPromptCanHoldAreRefusedWhileParsing) {
  std::string ids = R"({"input_ids": [5)";
  for (int i = 0; i < 1000000; ++i) ids += ",5";
  ids += "]}";
  const std::string message = refusal(ids, most_body_values(32));
  EXPECT_NE(message.find("holds more than 288 JSON values; a prompt holds at most 32 token ids"),
            std::string::npos)
      << message;
  // A prompt of the largest bucket and every other field fit.
  std::string fits = R"({"input_ids": [5)";
  for (int i = 1; i < 32; ++i) fits += ",5";
  fits += R"(], "max_tokens": 3, "stop": ["a", "b", "c"], "parameters": {"top_k": 4}})";
  EXPECT_EQ(refusal(fits), "");
}

TEST(CompletionRequest, NotJsonSaysWhyAndWhereButNotTheBytes) {
  const std::string invalid_utf8 = "{\"text_input\": \"ab\xff\xfe secret\"}";
  const std::string message = refusal(invalid_utf8);
  EXPECT_NE(message.find("the request body is not JSON: "), std::string::npos) << message;
  EXPECT_NE(message.find("ill-formed UTF-8 byte"), std::string::npos) << message;
  EXPECT_NE(message.find("(at byte 19)"), std::string::npos) << message;
  EXPECT_EQ(message.find("secret"), std::string::npos) << message;
  EXPECT_EQ(message.find('\xff'), std::string::npos) << message;
  EXPECT_NE(refusal("").find("not JSON"), std::string::npos);
  EXPECT_NE(refusal(R"({"a": 1} trailing)").find("not JSON"), std::string::npos);
  EXPECT_EQ(refusal(R"({"a": 1} trailing)").find("trailing"), std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("must be a JSON object, not [1,2]"), std::string::npos);
  EXPECT_NE(refusal("null").find("must be a JSON object"), std::string::npos);
}

TEST(CompletionRequest, RequestIdIsAShortString) {
  EXPECT_EQ(read_request_id(nlohmann::json("req-7")), "req-7");
  EXPECT_THROW(read_request_id(nlohmann::json(7)), CompletionError);
  EXPECT_THROW(read_request_id(nlohmann::json::array({1, 2})), CompletionError);
  EXPECT_EQ(read_request_id(nlohmann::json(std::string(kMostIdBytes, 'i'))).size(), kMostIdBytes);
  try {
    read_request_id(nlohmann::json(std::string(kMostIdBytes + 1, 'i')));
    ADD_FAILURE() << "a long id was taken";
  } catch (const CompletionError& error) {
    EXPECT_NE(std::string(error.what()).find("id is 257 bytes long; at most 256"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace grove::serving::llm
