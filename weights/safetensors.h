// The safetensors file format (the weights format of PyTorch and Hugging Face
// users): an 8-byte little-endian header length N, N bytes of JSON mapping
// each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the byte buffer after the header) plus an optional
// "__metadata__" object of strings, then the raw little-endian tensor bytes.
//
//   SafetensorsFile file = SafetensorsFile::open("mlp.safetensors");
//   const SafetensorsEntry& w = file.entry("fc0.weight");
//   std::span<const uint8_t> bytes = file.bytes(w);
//
//   write_safetensors("out.safetensors", {{"w", DType::kF32, {2, 2}, data}});
//
// Note [Safetensors validated before use]
// open() maps the file read-only and checks everything before any tensor is
// handed out, so no later read can leave the mapping: the header length is at
// most max_safetensors_header_bytes() and within the file; the header is one
// JSON object, at most kMaxHeaderDepth levels deep while parsing; every entry
// has a known dtype, a shape of non-negative sizes whose byte size (product
// times element size) does not overflow and equals end - begin; sorted by
// begin, the entries cover the byte buffer exactly, from 0 to its end, with
// no overlap and no gap. Every failure is a WeightsFormatError naming the
// file and, where there is one, the tensor. Guarded by the tests in
// tests/weights/safetensors_test.cc, among them
// Safetensors.RandomMutationsEndInSuccessOrWeightsFormatError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace grove::weights {

// A weights file that does not follow the format, or does not fit a model.
class WeightsFormatError : public Error {
 public:
  using Error::Error;
};

// Headers longer than this are refused before they are parsed (the format's
// own reference reader uses the same cap); GROVE_SAFETENSORS_MAX_HEADER_BYTES
// overrides it.
inline constexpr uint64_t kDefaultMaxHeaderBytes = uint64_t{100} << 20;
uint64_t max_safetensors_header_bytes();
inline constexpr int kMaxHeaderDepth = 4;

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;               // as in the file: "F32", "BF16", "U8", ...
  std::optional<runtime::DType> dtype;  // grove's dtype, when grove has one
  size_t element_size = 0;              // bytes per element
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the buffer after the header
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates `path` (Note [Safetensors validated before use]). The
  // mapping reads the file on use: for a caller that reads the tensors once,
  // right away. A file that is not regular (a FIFO) is refused without
  // blocking (Note [Weights files that cannot block], safetensors.cc).
  static SafetensorsFile open(const std::string& path);
  // Reads `path` into memory the object owns, then validates it: later reads
  // never touch the file, so a file truncated or rewritten meanwhile cannot
  // fault them (grove serve keeps its weights for re-plans).
  static SafetensorsFile read(const std::string& path);
  // Validates a file held in memory (`what` names it in messages); the file
  // object keeps its own copy.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, const std::string& what);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }
  // Where the tensor bytes begin in the file: 8 + the header length.
  uint64_t buffer_offset() const { return buffer_offset_; }
  // nullptr when the file has no tensor `name`.
  const SafetensorsEntry* find(const std::string& name) const;
  // The tensor `name`; WeightsFormatError naming it and the file when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  // The entry's raw bytes inside the mapping (valid while the file lives).
  std::span<const uint8_t> bytes(const SafetensorsEntry& entry) const;

 private:
  SafetensorsFile() = default;
  void parse();
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;  // the whole file
  size_t size_ = 0;
  bool mapped_ = false;         // data_ is an mmap (else it points into owned_)
  std::vector<uint8_t> owned_;  // from_bytes()
  uint64_t buffer_offset_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors name of a grove dtype ("F32", "BF16", "I64", "BOOL", ...).
const char* safetensors_dtype_name(runtime::DType dtype);

// One tensor to write: its bytes are shape's elements of dtype, little-endian,
// row-major.
struct TensorToWrite {
  std::string name;
  runtime::DType dtype = runtime::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The bytes of a safetensors file holding `tensors` (sorted by name in the
// buffer) and `metadata`; the header is padded with spaces to a multiple of 8
// so every tensor starts 8-byte aligned. WeightsFormatError on duplicate or
// empty names and on byte counts that do not match the shape.
std::vector<uint8_t> encode_safetensors(const std::vector<TensorToWrite>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});
// encode_safetensors() into `path` (written to a temporary beside it, then
// renamed, so a reader never sees half a file). Error naming the path when it
// cannot be written.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace grove::weights
