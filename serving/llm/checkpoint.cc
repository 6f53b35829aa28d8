// load_checkpoint(): a Hugging Face checkpoint's safetensors files (one, or a
// sharded checkpoint's shards: Note [Sharded checkpoints]) into a DecoderState.
#include <algorithm>
#include <cstring>
#include <set>
#include <span>

#include "runtime/error.h"
#include "serving/llm/decoder_state.h"

namespace grove::serving::llm {

namespace {

using weights::SafetensorsEntry;
using weights::SafetensorsFile;
using weights::WeightsFormatError;

// Tensors HF checkpoints may hold that grove computes itself or shares.
bool ignorable(const std::string& name, const DecoderConfig& config) {
  if (config.architecture == Architecture::kGpt2 && name.ends_with(".attn.bias")) {
    return true;  // GPT-2's causal-mask buffer "h.N.attn.bias" (c_attn.bias ends "_attn.bias")
  }
  if (name.ends_with(".attn.masked_bias") || name.ends_with("rotary_emb.inv_freq")) return true;
  return name == "lm_head.weight" &&
         (config.architecture == Architecture::kGpt2 || config.tie_word_embeddings);
}

// Where `name` is among `files` (Note [Sharded checkpoints]): the file and
// its entry, or nulls; a tensor in two files is refused.
std::pair<const SafetensorsFile*, const SafetensorsEntry*> find_in(
    std::span<const SafetensorsFile> files, const std::string& name) {
  std::pair<const SafetensorsFile*, const SafetensorsEntry*> found{nullptr, nullptr};
  for (const SafetensorsFile& file : files) {
    const SafetensorsEntry* entry = file.find(name);
    if (entry == nullptr) continue;
    GROVE_CHECK_AS(WeightsFormatError, found.first == nullptr, "tensor '", name, "' is in both ",
                   found.first ? found.first->path() : "", " and ", file.path(),
                   "; a checkpoint holds each tensor once");
    found = {&file, entry};
  }
  return found;
}

std::pair<const SafetensorsFile*, const SafetensorsEntry*> find_weight(
    std::span<const SafetensorsFile> files, const std::string& name, const DecoderConfig& config) {
  auto found = find_in(files, name);
  if (found.first == nullptr && config.architecture == Architecture::kGpt2 &&
      name.starts_with("transformer.")) {
    found = find_in(files, name.substr(std::string("transformer.").size()));
  }
  return found;
}

// The files' paths, for messages.
std::string paths_of(std::span<const SafetensorsFile> files) {
  std::string text;
  for (const SafetensorsFile& file : files) text += (text.empty() ? "" : ", ") + file.path();
  return text;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += str_cat(i ? ", " : "", shape[i]);
  return text + "]";
}

// The entry's bytes as `dtype` (converted element by element when they differ).
std::vector<uint8_t> converted(const SafetensorsFile& file, const SafetensorsEntry& entry,
                               runtime::DType dtype) {
  std::span<const uint8_t> bytes = file.bytes(entry);
  if (*entry.dtype == dtype) return {bytes.begin(), bytes.end()};
  const size_t count = bytes.size() / entry.element_size;
  const size_t element = runtime::dtype_size(dtype);
  std::vector<uint8_t> out(count * element);
  for (size_t i = 0; i < count; ++i) {
    double value = runtime::load_element(bytes.data() + i * entry.element_size, *entry.dtype);
    runtime::store_element(out.data() + i * element, dtype, value);
  }
  return out;
}

}  // namespace

uint64_t load_checkpoint(DecoderState& state, const SafetensorsFile& file) {
  return load_checkpoint(state, std::span<const SafetensorsFile>(&file, 1));
}

uint64_t load_checkpoint(DecoderState& state, std::span<const SafetensorsFile> files) {
  const DecoderConfig& config = state.config();
  GROVE_CHECK_AS(WeightsFormatError, !files.empty(), "a checkpoint needs a safetensors file");
  const std::string path = paths_of(files);
  std::set<std::pair<const SafetensorsFile*, std::string>> used;
  struct Copy {
    const runtime::Tensor* tensor;
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  std::vector<Copy> plan;
  // Everything is checked before anything is copied.
  for (const std::string& name : state.weight_names()) {
    const auto [file, entry] = find_weight(files, name, config);
    GROVE_CHECK_AS(WeightsFormatError, entry != nullptr, path, ": lacks tensor '", name,
                   "' that the ", architecture_name(config.architecture),
                   " config needs; is config.json the checkpoint's own?");
    const runtime::Tensor& tensor = state.tensor(name);
    std::vector<int64_t> expected(tensor.shape().begin(), tensor.shape().end());
    GROVE_CHECK_AS(WeightsFormatError, entry->shape == expected, file->path(), ": tensor '",
                   entry->name, "' is ", shape_text(entry->shape), " but the config makes it ",
                   shape_text(expected));
    const bool floating = entry->dtype && (*entry->dtype == runtime::DType::kF32 ||
                                           *entry->dtype == runtime::DType::kBF16 ||
                                           *entry->dtype == runtime::DType::kF16);
    GROVE_CHECK_AS(WeightsFormatError, floating, file->path(), ": tensor '", entry->name, "' is ",
                   entry->dtype_name, "; decoder weights must be F32, BF16 or F16");
    used.emplace(file, entry->name);
    plan.push_back({&tensor, file, entry});
  }
  for (const SafetensorsFile& file : files) {
    for (const SafetensorsEntry& entry : file.entries()) {
      GROVE_CHECK_AS(WeightsFormatError,
                     used.count({&file, entry.name}) || ignorable(entry.name, config), file.path(),
                     ": holds tensor '", entry.name, "' that a ",
                     architecture_name(config.architecture),
                     " decoder of this config does not have; check config.json against the "
                     "checkpoint");
    }
  }
  uint64_t copied = 0;
  for (const Copy& copy : plan) {
    std::vector<uint8_t> bytes = converted(*copy.file, *copy.entry, copy.tensor->dtype());
    runtime::Tensor target = *copy.tensor;
    target.copy_from_host(bytes.data());
    copied += bytes.size();
  }
  return copied;
}

}  // namespace grove::serving::llm
