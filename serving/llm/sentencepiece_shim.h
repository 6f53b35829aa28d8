// The C interface of libgrove_sentencepiece.so, the one object that links
// Debian's libsentencepiece (Note [SentencePiece at run time], tokenizer.h).
// Every call that can fail returns 0 on success, or writes a message into
// `error` (at most error_size bytes, NUL included) and returns -1. Buffers the
// shim returns are freed with grove_sentencepiece_release.
#pragma once

#include <cstddef>

extern "C" {
void* grove_sentencepiece_load(const char* path, char* error, size_t error_size);
void grove_sentencepiece_free(void* processor);
int grove_sentencepiece_size(const void* processor);
int grove_sentencepiece_bos_id(const void* processor);  // -1: none
int grove_sentencepiece_eos_id(const void* processor);  // -1: none
int grove_sentencepiece_encode(const void* processor, const char* text, size_t length, int** ids,
                               size_t* count, char* error, size_t error_size);
int grove_sentencepiece_decode(const void* processor, const int* ids, size_t count, char** text,
                               size_t* length, char* error, size_t error_size);
void grove_sentencepiece_release(void* buffer);
}
