// load_checkpoint(): a Hugging Face safetensors file into a DecoderState.
#include <algorithm>
#include <cstring>
#include <set>

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

const SafetensorsEntry* find_weight(const SafetensorsFile& file, const std::string& name,
                                    const DecoderConfig& config) {
  if (const SafetensorsEntry* entry = file.find(name)) return entry;
  if (config.architecture == Architecture::kGpt2 && name.starts_with("transformer.")) {
    return file.find(name.substr(std::string("transformer.").size()));
  }
  return nullptr;
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
  const DecoderConfig& config = state.config();
  const std::string& path = file.path();
  std::set<std::string> used;
  std::vector<std::pair<const runtime::Tensor*, const SafetensorsEntry*>> plan;
  // Everything is checked before anything is copied.
  for (const std::string& name : state.weight_names()) {
    const SafetensorsEntry* entry = find_weight(file, name, config);
    GROVE_CHECK_AS(WeightsFormatError, entry != nullptr, path, ": lacks tensor '", name,
                   "' that the ", architecture_name(config.architecture),
                   " config needs; is config.json the checkpoint's own?");
    const runtime::Tensor& tensor = state.tensor(name);
    std::vector<int64_t> expected(tensor.shape().begin(), tensor.shape().end());
    GROVE_CHECK_AS(WeightsFormatError, entry->shape == expected, path, ": tensor '", entry->name,
                   "' is ", shape_text(entry->shape), " but the config makes it ",
                   shape_text(expected));
    const bool floating = entry->dtype && (*entry->dtype == runtime::DType::kF32 ||
                                           *entry->dtype == runtime::DType::kBF16 ||
                                           *entry->dtype == runtime::DType::kF16);
    GROVE_CHECK_AS(WeightsFormatError, floating, path, ": tensor '", entry->name, "' is ",
                   entry->dtype_name, "; decoder weights must be F32, BF16 or F16");
    used.insert(entry->name);
    plan.emplace_back(&tensor, entry);
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    GROVE_CHECK_AS(WeightsFormatError, used.count(entry.name) || ignorable(entry.name, config),
                   path, ": holds tensor '", entry.name, "' that a ",
                   architecture_name(config.architecture),
                   " decoder of this config does not have; check config.json against the "
                   "checkpoint");
  }
  uint64_t copied = 0;
  for (const auto& [tensor, entry] : plan) {
    std::vector<uint8_t> bytes = converted(file, *entry, tensor->dtype());
    runtime::Tensor target = *tensor;
    target.copy_from_host(bytes.data());
    copied += bytes.size();
  }
  return copied;
}

}  // namespace grove::serving::llm
