#include "serving/llm/text_stream.h"

#include <algorithm>

namespace grove::serving::llm {

TextStream::TextStream(Detokenize detokenize, std::vector<int64_t> prompt_tail,
                       std::vector<std::string> stop_strings)
    : detokenize_(std::move(detokenize)),
      tokens_(std::move(prompt_tail)),
      tail_length_(tokens_.size()),
      stop_strings_(std::move(stop_strings)) {
  stop_strings_.erase(std::remove(stop_strings_.begin(), stop_strings_.end(), std::string()),
                      stop_strings_.end());
  for (const std::string& stop : stop_strings_)
    longest_stop_ = std::max(longest_stop_, stop.size());
  if (tail_length_ > 0) tail_text_ = detokenize_(tokens_);
}

std::string TextStream::generated_text() const {
  std::string text = detokenize_(tokens_);
  if (text.compare(0, tail_text_.size(), tail_text_) == 0) return text.substr(tail_text_.size());
  // The tail's text changed with what followed it: decode the generated tokens alone.
  return detokenize_(std::span<const int64_t>(tokens_).subspan(tail_length_));
}

size_t complete_utf8_prefix(const std::string& text) {
  size_t end = text.size();
  // An incomplete multi-byte character at the end.
  size_t start = end;
  while (start > 0 && end - start < 4 &&
         (static_cast<unsigned char>(text[start - 1]) & 0xC0) == 0x80) {
    --start;
  }
  if (start > 0) {
    const auto lead = static_cast<unsigned char>(text[start - 1]);
    const size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (want > 1 && end - (start - 1) < want) end = start - 1;
  }
  // Replacement characters at the end: byte-fallback pieces still to be joined.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (end >= kReplacement.size() &&
         text.compare(end - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
    end -= kReplacement.size();
  }
  return end;
}

TextStream::Step TextStream::add(int64_t token) {
  Step step;
  if (stopped_) return step;
  tokens_.push_back(token);
  const std::string text = generated_text();
  if (text.compare(0, released_.size(), released_) != 0) return step;  // wait until it agrees
  // Note [Stop strings over detokenized text].
  const size_t search_from =
      released_.size() >= longest_stop_ ? released_.size() - longest_stop_ + 1 : 0;
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stop_strings_) {
    stop_at = std::min(stop_at, text.find(stop, search_from));
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    step.stopped = true;
    if (stop_at > released_.size()) {
      step.released = text.substr(released_.size(), stop_at - released_.size());
      released_ += step.released;
    }
    return step;
  }
  size_t end = complete_utf8_prefix(text);
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t k = std::min(stop.size() - 1, end); k > hold; --k) {
      if (text.compare(end - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  end -= hold;
  if (end > released_.size()) {
    step.released = text.substr(released_.size(), end - released_.size());
    released_ += step.released;
  }
  return step;
}

std::string TextStream::finish() {
  if (stopped_) return "";
  const std::string text = generated_text();
  if (text.size() <= released_.size() || text.compare(0, released_.size(), released_) != 0) {
    return "";
  }
  std::string rest = text.substr(released_.size());
  released_ = text;
  return rest;
}

}  // namespace grove::serving::llm
