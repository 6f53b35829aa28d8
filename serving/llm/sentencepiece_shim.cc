// libgrove_sentencepiece.so: SentencePieceProcessor behind a C interface that
// grove opens with dlopen (Note [SentencePiece at run time]).
#include "serving/llm/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

void put_error(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t length = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), length);
  error[length] = '\0';
}

const sentencepiece::SentencePieceProcessor& processor_of(const void* processor) {
  return *static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
}

}  // namespace

extern "C" {

void* grove_sentencepiece_load(const char* path, char* error, size_t error_size) {
  auto* processor = new (std::nothrow) sentencepiece::SentencePieceProcessor();
  if (processor == nullptr) {
    put_error("out of memory", error, error_size);
    return nullptr;
  }
  const sentencepiece::util::Status status = processor->Load(path);
  if (!status.ok()) {
    put_error(status.ToString(), error, error_size);
    delete processor;
    return nullptr;
  }
  return processor;
}

void grove_sentencepiece_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

int grove_sentencepiece_size(const void* processor) {
  return processor_of(processor).GetPieceSize();
}

int grove_sentencepiece_bos_id(const void* processor) { return processor_of(processor).bos_id(); }

int grove_sentencepiece_eos_id(const void* processor) { return processor_of(processor).eos_id(); }

int grove_sentencepiece_encode(const void* processor, const char* text, size_t length, int** ids,
                               size_t* count, char* error, size_t error_size) {
  std::vector<int> pieces;
  const sentencepiece::util::Status status =
      processor_of(processor).Encode(std::string_view(text, length), &pieces);
  if (!status.ok()) {
    put_error(status.ToString(), error, error_size);
    return -1;
  }
  *count = pieces.size();
  *ids = static_cast<int*>(std::malloc(std::max<size_t>(1, pieces.size()) * sizeof(int)));
  if (*ids == nullptr) {
    put_error("out of memory", error, error_size);
    return -1;
  }
  if (!pieces.empty()) std::memcpy(*ids, pieces.data(), pieces.size() * sizeof(int));
  return 0;
}

int grove_sentencepiece_decode(const void* processor, const int* ids, size_t count, char** text,
                               size_t* length, char* error, size_t error_size) {
  std::string decoded;
  const sentencepiece::util::Status status =
      processor_of(processor).Decode(std::vector<int>(ids, ids + count), &decoded);
  if (!status.ok()) {
    put_error(status.ToString(), error, error_size);
    return -1;
  }
  *length = decoded.size();
  *text = static_cast<char*>(std::malloc(decoded.size() + 1));
  if (*text == nullptr) {
    put_error("out of memory", error, error_size);
    return -1;
  }
  std::memcpy(*text, decoded.data(), decoded.size());
  (*text)[decoded.size()] = '\0';
  return 0;
}

void grove_sentencepiece_release(void* buffer) { std::free(buffer); }

}  // extern "C"
