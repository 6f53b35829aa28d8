// Tokenizer turns text into token ids and back with a SentencePiece model
// (the tokenizer.model of LLaMA-family checkpoints).
//
//   auto tokenizer = Tokenizer::load("models/tiny-llama/tokenizer.model");
//   std::vector<int64_t> ids = tokenizer->encode("Hello");
//   std::string text = tokenizer->decode(ids);
//
// Note [SentencePiece at run time]
// Only libgrove_sentencepiece.so (serving/llm/sentencepiece_shim.cc) links
// Debian's libsentencepiece; grove opens it with dlopen when a tokenizer is
// loaded, so `grove` starts and serves token ids on a machine without
// SentencePiece (a GPU host the binaries are carried to). It is looked up at
// $GROVE_SENTENCEPIECE_LIB, then next to the executable's build tree
// (EXE_DIR/../serving/llm/, the bazel-bin layout), then in the test's
// runfiles ($TEST_SRCDIR/grove/serving/llm/), then by the dynamic linker's
// search. Tests: Tokenizer.* (tests/serving/llm/tokenizer_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grove::serving::llm {

class Tokenizer {
 public:
  // Throws grove::Error naming the file when it is not a SentencePiece model,
  // or the shim library when it cannot be opened.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The pieces of `text` (no BOS: see bos_id()).
  std::vector<int64_t> encode(std::string_view text) const;
  // The text of `ids`; ids outside [0, vocab_size()) are skipped (a model's
  // vocabulary may be padded beyond its tokenizer's).
  std::string decode(std::span<const int64_t> ids) const;
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int64_t> bos_id() const { return bos_id_; }
  std::optional<int64_t> eos_id() const { return eos_id_; }
  const std::string& path() const { return path_; }

 private:
  struct Library;
  Tokenizer(const Library& library, void* processor, std::string path);

  const Library& library_;
  void* processor_;
  std::string path_;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> bos_id_;
  std::optional<int64_t> eos_id_;
};

// Where a checkpoint directory's tokenizer is: MODEL_DIR/tokenizer.model
// when that file exists.
std::optional<std::string> find_tokenizer(const std::string& model_dir);

}  // namespace grove::serving::llm
