// TextStream turns a request's generated tokens into the text its client may
// see, token by token: it detokenizes, stops at a stop string, and holds back
// what could still become one, or is half a UTF-8 character.
//
//   TextStream text([&](auto ids) { return tokenizer.decode(ids); }, prompt_tail, {"\n\n"});
//   TextStream::Step step = text.add(token);   // step.released: new text; step.stopped
//   std::string rest = text.finish();          // at EOS or max tokens
//
// Note [Stop strings over detokenized text]
// The text of the generated tokens is decoded whole after each token (after
// the last few prompt tokens, whose text is then cut off, so a SentencePiece
// word's leading space survives), so a stop string is found whatever tokens
// spell it. Released text never contains a stop string and is never taken
// back: the text after the last release is searched for every stop string
// (from max stop length - 1 bytes back); a match ends the request, and the
// text before it is the last released. Otherwise the longest tail that is a
// prefix of some stop string, and an incomplete UTF-8 character or U+FFFD at
// the end (a byte-fallback character split across tokens), are held back
// until the next token decides them. Tests: TextStream.* (tests/serving/llm/text_stream_test.cc),
// test_stop_string_* (tests/serving/llm/llm_http_test.py).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace grove::serving::llm {

class TextStream {
 public:
  using Detokenize = std::function<std::string(std::span<const int64_t>)>;
  // `prompt_tail`: the prompt's last tokens, decoded before the generated ones.
  TextStream(Detokenize detokenize, std::vector<int64_t> prompt_tail,
             std::vector<std::string> stop_strings);

  struct Step {
    std::string released;  // text the client may see now
    bool stopped = false;  // a stop string ended the request (not in `released`)
  };
  Step add(int64_t token);
  // The text still held back, once the request ended without a stop string.
  std::string finish();
  const std::string& released() const { return released_; }
  bool stopped() const { return stopped_; }

  // How many prompt tokens TextStream wants as its context.
  static constexpr size_t kPromptTail = 4;

 private:
  std::string generated_text() const;

  Detokenize detokenize_;
  std::vector<int64_t> tokens_;  // the prompt tail, then the generated tokens
  size_t tail_length_ = 0;
  std::string tail_text_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  std::string released_;
  bool stopped_ = false;
};

// The length of the longest prefix of `text` that ends on a whole UTF-8
// character and not in U+FFFD (what may be released of a decoded text).
size_t complete_utf8_prefix(const std::string& text);

}  // namespace grove::serving::llm
