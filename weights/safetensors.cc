#include "weights/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace grove::weights {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors holds little-endian bytes; grove reads them in place");

struct KnownDType {
  const char* name;
  size_t size;
  std::optional<runtime::DType> dtype;
};

// Every dtype the format defines; those grove computes with carry its DType.
const KnownDType kKnownDTypes[] = {
    {"BOOL", 1, runtime::DType::kBool},
    {"U8", 1, std::nullopt},
    {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
    {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},
    {"F16", 2, runtime::DType::kF16},
    {"BF16", 2, runtime::DType::kBF16},
    {"I32", 4, runtime::DType::kI32},
    {"U32", 4, std::nullopt},
    {"F32", 4, runtime::DType::kF32},
    {"F64", 8, runtime::DType::kF64},
    {"I64", 8, runtime::DType::kI64},
    {"U64", 8, std::nullopt},
};

const KnownDType* find_dtype(const std::string& name) {
  for (const KnownDType& known : kKnownDTypes) {
    if (name == known.name) return &known;
  }
  return nullptr;
}

std::string known_dtype_list() {
  std::string list;
  for (const KnownDType& known : kKnownDTypes) {
    list += list.empty() ? "" : ", ";
    list += known.name;
  }
  return list;
}

uint64_t read_le_u64(const uint8_t* at) {
  uint64_t value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

uint64_t max_safetensors_header_bytes() {
  const char* text = std::getenv("GROVE_SAFETENSORS_MAX_HEADER_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultMaxHeaderBytes;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  GROVE_CHECK_AS(ConfigError, errno == 0 && *end == '\0' && value > 0 && text[0] != '-',
                 "GROVE_SAFETENSORS_MAX_HEADER_BYTES='", text,
                 "': expected a positive number of bytes");
  return static_cast<uint64_t>(value);
}

namespace {

// Note [Weights files that cannot block]: a FIFO (or a terminal, a socket)
// named as a weights or inputs file would block open() until a writer came,
// and the process with it (issue 35, case 11). So the file is opened with
// O_NONBLOCK, which never waits, and refused unless fstat says it is a
// regular file, before anything reads it. Guarded by
// Safetensors.AFifoIsRefusedWithoutBlocking and the FIFO cases of
// tests/serving/serve_files_test.py.
int open_regular_file(const std::string& path, struct stat& status) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  GROVE_CHECK_AS(WeightsFormatError, fd >= 0, "cannot open weights file '", path,
                 "': ", std::strerror(errno));
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw WeightsFormatError(str_cat("weights file '", path,
                                     "' is not a regular file (a FIFO, device or directory); give "
                                     "a .safetensors file"));
  }
  return fd;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  struct stat status {};
  int fd = open_regular_file(path, status);
  file.size_ = static_cast<size_t>(status.st_size);
  if (file.size_ > 0) {
    void* mapping = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      throw WeightsFormatError(
          str_cat("cannot map weights file '", path, "': ", std::strerror(error)));
    }
    file.data_ = static_cast<const uint8_t*>(mapping);
    file.mapped_ = true;
  }
  ::close(fd);
  file.parse();
  return file;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  struct stat status {};
  int fd = open_regular_file(path, status);
  std::vector<uint8_t> bytes(static_cast<size_t>(status.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int error = got < 0 ? errno : 0;
      ::close(fd);
      throw WeightsFormatError(str_cat("cannot read weights file '", path, "': ",
                                       error != 0 ? std::strerror(error) : "it shrank while read",
                                       " (", done, " of ", bytes.size(), " bytes read)"));
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return from_bytes(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, const std::string& what) {
  SafetensorsFile file;
  file.path_ = what;
  file.owned_ = std::move(bytes);
  file.data_ = file.owned_.data();
  file.size_ = file.owned_.size();
  file.parse();
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  mapped_ = std::exchange(other.mapped_, false);
  size_ = std::exchange(other.size_, 0);
  owned_ = std::move(other.owned_);
  // A moved vector keeps its buffer, so data_ stays valid for from_bytes() files.
  data_ = std::exchange(other.data_, nullptr);
  buffer_offset_ = other.buffer_offset_;
  entries_ = std::move(other.entries_);
  metadata_ = std::move(other.metadata_);
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (mapped_ && data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  mapped_ = false;
  data_ = nullptr;
  size_ = 0;
}

void SafetensorsFile::parse() {
  // Note [Safetensors validated before use].
  const std::string& file = path_;
  GROVE_CHECK_AS(WeightsFormatError, size_ >= 8, "weights file '", file, "' is truncated: ", size_,
                 " bytes; a safetensors file starts with an 8-byte header length");
  const uint64_t header_bytes = read_le_u64(data_);
  const uint64_t limit = max_safetensors_header_bytes();
  GROVE_CHECK_AS(WeightsFormatError, header_bytes <= limit, "weights file '", file,
                 "': header length ", header_bytes, " exceeds the limit of ", limit,
                 " bytes (GROVE_SAFETENSORS_MAX_HEADER_BYTES); is it a safetensors file?");
  GROVE_CHECK_AS(WeightsFormatError, header_bytes <= size_ - 8, "weights file '", file,
                 "' is truncated: its header claims ", header_bytes, " bytes but only ", size_ - 8,
                 " follow the length");
  GROVE_CHECK_AS(WeightsFormatError, header_bytes >= 2 && data_[8] == '{', "weights file '", file,
                 "': the header is not a JSON object (it must start with '{')");
  buffer_offset_ = 8 + header_bytes;
  const uint64_t buffer_bytes = size_ - buffer_offset_;

  json header;
  try {
    header =
        json::parse(data_ + 8, data_ + buffer_offset_, [&](int depth, json::parse_event_t, json&) {
          if (depth > kMaxHeaderDepth) {
            throw WeightsFormatError(str_cat("weights file '", file,
                                             "': the header nests deeper than ", kMaxHeaderDepth,
                                             " levels"));
          }
          return true;
        });
  } catch (const json::exception& error) {
    throw WeightsFormatError(
        str_cat("weights file '", file, "': the header is not valid JSON: ", error.what()));
  }
  GROVE_CHECK_AS(WeightsFormatError, header.is_object(), "weights file '", file,
                 "': the header is not a JSON object");

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      GROVE_CHECK_AS(WeightsFormatError, value.is_object(), "weights file '", file,
                     "': __metadata__ must be an object of strings");
      for (const auto& [key, text] : value.items()) {
        GROVE_CHECK_AS(WeightsFormatError, text.is_string(), "weights file '", file,
                       "': __metadata__ entry '", key, "' is not a string");
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    const std::string where = str_cat("weights file '", file, "', tensor '", name, "'");
    GROVE_CHECK_AS(WeightsFormatError, value.is_object(), where,
                   ": expected an object with dtype, shape and data_offsets");
    for (const auto& [key, unused] : value.items()) {
      GROVE_CHECK_AS(WeightsFormatError, key == "dtype" || key == "shape" || key == "data_offsets",
                     where, ": unknown field '", key, "' (expected dtype, shape, data_offsets)");
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      GROVE_CHECK_AS(WeightsFormatError, value.contains(key), where, ": missing field '", key, "'");
    }
    SafetensorsEntry entry;
    entry.name = name;
    GROVE_CHECK_AS(WeightsFormatError, value["dtype"].is_string(), where,
                   ": dtype must be a string");
    entry.dtype_name = value["dtype"].get<std::string>();
    const KnownDType* known = find_dtype(entry.dtype_name);
    GROVE_CHECK_AS(WeightsFormatError, known != nullptr, where, ": unknown dtype '",
                   entry.dtype_name, "' (the format's dtypes: ", known_dtype_list(), ")");
    entry.element_size = known->size;
    entry.dtype = known->dtype;

    const json& shape = value["shape"];
    GROVE_CHECK_AS(WeightsFormatError, shape.is_array(), where,
                   ": shape must be an array of sizes");
    uint64_t bytes = entry.element_size;
    for (const json& size : shape) {
      GROVE_CHECK_AS(WeightsFormatError, size.is_number_unsigned(), where, ": shape ", shape.dump(),
                     " holds ", size.dump(), "; sizes are integers >= 0");
      const uint64_t extent = size.get<uint64_t>();
      GROVE_CHECK_AS(WeightsFormatError,
                     extent <= static_cast<uint64_t>(INT64_MAX) &&
                         !__builtin_mul_overflow(bytes, extent, &bytes),
                     where, ": shape ", shape.dump(), " overflows 64 bits of bytes");
      entry.shape.push_back(static_cast<int64_t>(extent));
    }

    const json& offsets = value["data_offsets"];
    GROVE_CHECK_AS(WeightsFormatError,
                   offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                       offsets[1].is_number_unsigned(),
                   where, ": data_offsets must be [begin, end], two integers >= 0; found ",
                   offsets.dump());
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    GROVE_CHECK_AS(WeightsFormatError, entry.begin <= entry.end, where, ": data_offsets [",
                   entry.begin, ", ", entry.end, "] end before they begin");
    GROVE_CHECK_AS(WeightsFormatError, entry.end <= buffer_bytes, where, ": data_offsets [",
                   entry.begin, ", ", entry.end, "] reach past the ", buffer_bytes,
                   " data bytes the file holds (truncated?)");
    GROVE_CHECK_AS(WeightsFormatError, entry.nbytes() == bytes, where, ": ", entry.dtype_name,
                   shape_text(entry.shape), " needs ", bytes, " bytes but data_offsets [",
                   entry.begin, ", ", entry.end, "] hold ", entry.nbytes());
    entries_.push_back(std::move(entry));
  }

  // The tensors must tile the buffer: sorted by offset, each begins where the
  // previous one ended, and the last ends at the end of the file.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& entry : entries_) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* entry : by_offset) {
    GROVE_CHECK_AS(WeightsFormatError, entry->begin >= covered, "weights file '", file,
                   "', tensor '", entry->name, "': data_offsets [", entry->begin, ", ", entry->end,
                   "] overlap tensor '", previous ? previous->name : "", "', which ends at ",
                   covered);
    GROVE_CHECK_AS(WeightsFormatError, entry->begin == covered, "weights file '", file,
                   "', tensor '", entry->name, "': data_offsets [", entry->begin, ", ", entry->end,
                   "] leave a gap of ", entry->begin - covered, " bytes after offset ", covered);
    covered = entry->end;
    if (entry->nbytes() > 0) previous = entry;
  }
  GROVE_CHECK_AS(WeightsFormatError, covered == buffer_bytes, "weights file '", file,
                 "': ", buffer_bytes - covered, " bytes after the last tensor (offset ", covered,
                 ") belong to no tensor");
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto found = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const SafetensorsEntry& entry, const std::string& key) { return entry.name < key; });
  return found != entries_.end() && found->name == name ? &*found : nullptr;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const SafetensorsEntry* found = find(name);
  GROVE_CHECK_AS(WeightsFormatError, found != nullptr, "weights file '", path_, "' has no tensor '",
                 name, "'");
  return *found;
}

std::span<const uint8_t> SafetensorsFile::bytes(const SafetensorsEntry& entry) const {
  return {data_ + buffer_offset_ + entry.begin, static_cast<size_t>(entry.nbytes())};
}

const char* safetensors_dtype_name(runtime::DType dtype) {
  for (const KnownDType& known : kKnownDTypes) {
    if (known.dtype == dtype) return known.name;
  }
  throw DTypeError(str_cat("dtype ", runtime::dtype_name(dtype), " has no safetensors name"));
}

std::vector<uint8_t> encode_safetensors(const std::vector<TensorToWrite>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const TensorToWrite& tensor : tensors) sorted.push_back(&tensor);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& tensor = *sorted[i];
    GROVE_CHECK_AS(WeightsFormatError, !tensor.name.empty() && tensor.name != "__metadata__",
                   "encode_safetensors: tensor name '", tensor.name, "' is reserved or empty");
    GROVE_CHECK_AS(WeightsFormatError, i == 0 || sorted[i - 1]->name != tensor.name,
                   "encode_safetensors: two tensors are named '", tensor.name, "'");
    uint64_t bytes = runtime::dtype_size(tensor.dtype);
    for (int64_t extent : tensor.shape) {
      GROVE_CHECK_AS(
          WeightsFormatError,
          extent >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(extent), &bytes),
          "encode_safetensors: tensor '", tensor.name, "' has shape ", shape_text(tensor.shape),
          "; sizes must be >= 0 and fit 64 bits of bytes");
    }
    GROVE_CHECK_AS(WeightsFormatError, bytes == tensor.bytes.size(), "encode_safetensors: tensor '",
                   tensor.name, "' ", shape_text(tensor.shape), " of ",
                   runtime::dtype_name(tensor.dtype), " needs ", bytes, " bytes, given ",
                   tensor.bytes.size());
    header[tensor.name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> file(8 + text.size());
  const uint64_t length = text.size();
  std::memcpy(file.data(), &length, 8);
  std::memcpy(file.data() + 8, text.data(), text.size());
  file.reserve(file.size() + offset);
  for (const TensorToWrite* tensor : sorted) {
    file.insert(file.end(), tensor->bytes.begin(), tensor->bytes.end());
  }
  return file;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> bytes = encode_safetensors(tensors, metadata);
  const std::string temporary = str_cat(path, ".tmp", ::getpid());
  std::FILE* out = std::fopen(temporary.c_str(), "wb");
  GROVE_CHECK(out != nullptr, "cannot write weights file '", path, "': ", std::strerror(errno));
  bool written = std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size();
  written = std::fclose(out) == 0 && written;
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    std::remove(temporary.c_str());
    throw Error(str_cat("cannot write weights file '", path, "': ", std::strerror(error)));
  }
}

}  // namespace grove::weights
