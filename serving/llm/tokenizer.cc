#include "serving/llm/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "runtime/error.h"
#include "serving/llm/sentencepiece_shim.h"

namespace grove::serving::llm {

// The shim's functions, opened once per process (Note [SentencePiece at run time]).
struct Tokenizer::Library {
  decltype(&grove_sentencepiece_load) load = nullptr;
  decltype(&grove_sentencepiece_free) free = nullptr;
  decltype(&grove_sentencepiece_size) size = nullptr;
  decltype(&grove_sentencepiece_bos_id) bos_id = nullptr;
  decltype(&grove_sentencepiece_eos_id) eos_id = nullptr;
  decltype(&grove_sentencepiece_encode) encode = nullptr;
  decltype(&grove_sentencepiece_decode) decode = nullptr;
  decltype(&grove_sentencepiece_release) release = nullptr;
  std::string error;  // why it could not be opened
};

namespace {

constexpr const char* kShimName = "libgrove_sentencepiece.so";

std::vector<std::string> shim_candidates() {
  std::vector<std::string> candidates;
  if (const char* given = std::getenv("GROVE_SENTENCEPIECE_LIB"); given && *given) {
    candidates.emplace_back(given);
  }
  char exe[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length > 0) {
    std::filesystem::path dir = std::filesystem::path(std::string(exe, length)).parent_path();
    candidates.push_back((dir / ".." / "serving" / "llm" / kShimName).lexically_normal());
  }
  if (const char* runfiles = std::getenv("TEST_SRCDIR"); runfiles && *runfiles) {
    candidates.push_back(std::string(runfiles) + "/grove/serving/llm/" + kShimName);
  }
  candidates.emplace_back(kShimName);  // the dynamic linker's search
  return candidates;
}

template <typename Function>
void bind(void* handle, const char* name, Function& function, std::string& missing) {
  function = reinterpret_cast<Function>(::dlsym(handle, name));
  if (function == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_path) {
  static const Library library = [] {
    Library opened;
    std::string tried;
    void* handle = nullptr;
    for (const std::string& candidate : shim_candidates()) {
      if (candidate.find('/') != std::string::npos && !std::filesystem::exists(candidate)) {
        tried += "\n  " + candidate + " (not there)";
        continue;
      }
      handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) break;
      const char* why = ::dlerror();
      tried += "\n  " + candidate + " (" + (why ? why : "dlopen failed") + ")";
    }
    if (handle == nullptr) {
      opened.error = str_cat("cannot open ", kShimName,
                             " (SentencePiece; Debian's libsentencepiece0 must be installed). "
                             "Tried:",
                             tried, "\nSet GROVE_SENTENCEPIECE_LIB to its path, or send token ids");
      return opened;
    }
    std::string missing;
    bind(handle, "grove_sentencepiece_load", opened.load, missing);
    bind(handle, "grove_sentencepiece_free", opened.free, missing);
    bind(handle, "grove_sentencepiece_size", opened.size, missing);
    bind(handle, "grove_sentencepiece_bos_id", opened.bos_id, missing);
    bind(handle, "grove_sentencepiece_eos_id", opened.eos_id, missing);
    bind(handle, "grove_sentencepiece_encode", opened.encode, missing);
    bind(handle, "grove_sentencepiece_decode", opened.decode, missing);
    bind(handle, "grove_sentencepiece_release", opened.release, missing);
    if (!missing.empty()) opened.error = str_cat(kShimName, " lacks ", missing);
    return opened;
  }();
  GROVE_CHECK(library.error.empty(), "tokenizer ", model_path, ": ", library.error);
  char error[512] = {};
  void* processor = library.load(model_path.c_str(), error, sizeof(error));
  GROVE_CHECK(processor != nullptr, "tokenizer ", model_path,
              " is not a SentencePiece model file: ", error);
  return std::unique_ptr<Tokenizer>(new Tokenizer(library, processor, model_path));
}

Tokenizer::Tokenizer(const Library& library, void* processor, std::string path)
    : library_(library), processor_(processor), path_(std::move(path)) {
  vocab_size_ = library_.size(processor_);
  if (int bos = library_.bos_id(processor_); bos >= 0) bos_id_ = bos;
  if (int eos = library_.eos_id(processor_); eos >= 0) eos_id_ = eos;
}

Tokenizer::~Tokenizer() { library_.free(processor_); }

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  int* ids = nullptr;
  size_t count = 0;
  char error[512] = {};
  GROVE_CHECK(library_.encode(processor_, text.data(), text.size(), &ids, &count, error,
                              sizeof(error)) == 0,
              "tokenizer ", path_, " cannot encode the text: ", error);
  std::vector<int64_t> out(ids, ids + count);
  library_.release(ids);
  return out;
}

std::string Tokenizer::decode(std::span<const int64_t> ids) const {
  std::vector<int> known;
  known.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < vocab_size_) known.push_back(static_cast<int>(id));
  }
  char* text = nullptr;
  size_t length = 0;
  char error[512] = {};
  GROVE_CHECK(library_.decode(processor_, known.data(), known.size(), &text, &length, error,
                              sizeof(error)) == 0,
              "tokenizer ", path_, " cannot decode ", known.size(), " ids: ", error);
  std::string out(text, length);
  library_.release(text);
  return out;
}

std::optional<std::string> find_tokenizer(const std::string& model_dir) {
  std::error_code error;
  const std::filesystem::path path = std::filesystem::path(model_dir) / "tokenizer.model";
  if (std::filesystem::is_regular_file(path, error)) return path.string();
  return std::nullopt;
}

}  // namespace grove::serving::llm
