#include "serving/llm/decoder_state.h"

#include <cmath>

#include "compiler/backends/compile.h"
#include "runtime/error.h"

namespace grove::serving::llm {

DecoderState::DecoderState(const DecoderConfig& config, const CacheShape& cache,
                           runtime::Device device)
    : config_(config), cache_(cache), device_(device) {
  // Note [LLaMA's family] (decoder_config.cc).
  GROVE_CHECK(!config_.sliding_window || cache_.max_seq_len <= *config_.sliding_window,
              "the checkpoint's attention sees the last ", config_.sliding_window.value_or(0),
              " positions (sliding_window) and grove's attention sees all of them: a cache of ",
              cache_.max_seq_len, " positions would differ from the model; use max_seq_len <= ",
              config_.sliding_window.value_or(0));
  // The one-token chunk program declares every weight, table and the full cache.
  compiler::ir::Program program = build_prefill_program(config_, cache_, 1, device_, true);
  for (const compiler::ir::Value& value : program.values()) {
    if (!value.is_persistent()) continue;
    tensors_.emplace(value.name, compiler::backends::initial_tensor(value, device_));
  }
  add_fused_weight_views();
  fill_tables();
}

// Note [Fused projection weights]: the checkpoint's names for the parts of
// each fused weight, as views (rows along dim 0, so each is contiguous).
void DecoderState::add_fused_weight_views() {
  for (const FusedWeightPart& part : fused_weight_parts(config_)) {
    tensors_.emplace(part.name, tensors_.at(part.fused).slice(0, part.row_begin, part.row_end));
  }
}

void DecoderState::fill_tables() {
  std::vector<int64_t> positions(static_cast<size_t>(cache_.max_seq_len));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  tensors_.at(kPositionsTable).copy_from_host(positions.data());
  if (config_.architecture != Architecture::kLlama) return;
  // As HF's LlamaRotaryEmbedding: inv_freq in f32 (Note [Rotary settings in
  // both layouts]), angles t * inv_freq in f32, cos/sin of [angles, angles],
  // then the model dtype.
  const int64_t d = config_.head_dim();
  const int64_t half = d / 2;
  const std::vector<float> inv_freq = config_.rope.inverse_frequencies(d);
  const runtime::DType dtype = config_.dtype;
  const size_t element = runtime::dtype_size(dtype);
  std::vector<uint8_t> cos_bytes(static_cast<size_t>(cache_.max_seq_len * d) * element);
  std::vector<uint8_t> sin_bytes(cos_bytes.size());
  for (int64_t t = 0; t < cache_.max_seq_len; ++t) {
    for (int64_t j = 0; j < d; ++j) {
      float angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(j % half)];
      size_t at = static_cast<size_t>(t * d + j) * element;
      runtime::store_element(cos_bytes.data() + at, dtype, std::cos(angle));
      runtime::store_element(sin_bytes.data() + at, dtype, std::sin(angle));
    }
  }
  tensors_.at(kRopeCos).copy_from_host(cos_bytes.data());
  tensors_.at(kRopeSin).copy_from_host(sin_bytes.data());
  // Note [Rotate-half as a GEMM]: row j of R picks -x[j + d/2] (j < d/2) or x[j - d/2].
  std::vector<uint8_t> rotation_bytes(static_cast<size_t>(d * d) * element);
  for (int64_t j = 0; j < d; ++j) {
    const int64_t from = j < half ? j + half : j - half;
    runtime::store_element(rotation_bytes.data() + static_cast<size_t>(j * d + from) * element,
                           dtype, j < half ? -1.0 : 1.0);
  }
  tensors_.at(kRopeRotation).copy_from_host(rotation_bytes.data());
}

runtime::Tensor DecoderState::bind(const compiler::ir::Value& value) const {
  auto found = tensors_.find(value.name);
  GROVE_CHECK(found != tensors_.end(), "decoder state has no tensor '", value.name,
              "' for the program; the program and the state come from different configs");
  const runtime::Tensor& tensor = found->second;
  if (tensor.shape() == value.type.shape) return tensor;
  GROVE_CHECK(is_cache_name(value.name) && value.type.shape.size() == 4 &&
                  value.type.shape[0] <= tensor.shape()[0],
              "decoder state tensor '", value.name, "' is ", tensor.str(),
              " but the program declares ", value.type.str());
  // Note [KV cache in static buffers]: the first b slots, same address.
  return tensor.slice(0, 0, value.type.shape[0]);
}

const runtime::Tensor& DecoderState::tensor(const std::string& name) const {
  auto found = tensors_.find(name);
  GROVE_CHECK(found != tensors_.end(), "decoder state has no tensor '", name, "'");
  return found->second;
}

std::vector<runtime::Tensor> DecoderState::cache_tensors() const {
  std::vector<runtime::Tensor> caches;
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    caches.push_back(tensor(key_cache_name(layer)));
    caches.push_back(tensor(value_cache_name(layer)));
  }
  return caches;
}

std::vector<std::string> DecoderState::weight_names() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) {
    if (!is_grove_state_name(name)) names.push_back(name);
  }
  return names;
}

uint64_t DecoderState::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : tensors_) {
    if (!is_grove_state_name(name)) total += tensor.nbytes();
  }
  return total;
}

uint64_t DecoderState::cache_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : tensors_) {
    if (is_cache_name(name)) total += tensor.nbytes();
  }
  return total;
}

}  // namespace grove::serving::llm
