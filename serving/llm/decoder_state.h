// DecoderState owns the device tensors every program of one decoder model
// binds: the weights (Hugging Face names), the KV cache and grove's tables.
// Programs of every bucket share them through compile()'s StateBinder, so a
// request's cache written by a prefill is read by any decode bucket.
//
//   DecoderState state(config, {.slots = 8, .max_seq_len = 256}, device);
//   load_checkpoint(state, SafetensorsFile::open(dir + "/model.safetensors"));
//   compile(program, options, [&](const Value& v) { return state.bind(v); }, backend);
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "runtime/tensor.h"
#include "serving/llm/decoder_config.h"
#include "serving/llm/decoder_program.h"
#include "weights/safetensors.h"

namespace grove::serving::llm {

class DecoderState {
 public:
  // Allocates every tensor (weights zero until a checkpoint is loaded, the
  // cache zero) and fills the tables (positions, rotary cos/sin).
  DecoderState(const DecoderConfig& config, const CacheShape& cache, runtime::Device device);

  // The tensor a program binds to its param or buffer `value`: the tensor of
  // that name, or for a decode bucket's cache of b slots the view of the first
  // b slots (Note [KV cache in static buffers]). Throws naming the value when
  // its type fits neither.
  runtime::Tensor bind(const compiler::ir::Value& value) const;

  const runtime::Tensor& tensor(const std::string& name) const;
  // Every layer's key cache then value cache, layer by layer: the order of a
  // decode program's new-row outputs (Note [KV cache in static buffers]).
  std::vector<runtime::Tensor> cache_tensors() const;
  // The names a checkpoint must provide, sorted.
  std::vector<std::string> weight_names() const;
  const DecoderConfig& config() const { return config_; }
  const CacheShape& cache() const { return cache_; }
  runtime::Device device() const { return device_; }
  // Bytes of weights and of KV cache on the device.
  uint64_t weight_bytes() const;
  uint64_t cache_bytes() const;

 private:
  void add_fused_weight_views();
  void fill_tables();

  DecoderConfig config_;
  CacheShape cache_;
  runtime::Device device_;
  std::map<std::string, runtime::Tensor> tensors_;
};

// Copies a Hugging Face checkpoint into `state`'s weights. Every weight must be
// in the file with its shape; F32, BF16 and F16 tensors are converted to the
// model's dtype. GPT-2 names may lack the "transformer." prefix (GPT2Model
// checkpoints); buffers HF saves but grove computes (attn.bias, attn.masked_bias,
// rotary_emb.inv_freq) and a tied lm_head.weight are ignored. Anything else
// missing, extra or mismatched is a WeightsFormatError naming the tensor, and
// nothing is copied. Returns the bytes copied.
uint64_t load_checkpoint(DecoderState& state, const weights::SafetensorsFile& file);
// The same over a sharded checkpoint's files (Note [Sharded checkpoints],
// checkpoint_files.h): each weight from the one file that holds it.
uint64_t load_checkpoint(DecoderState& state, std::span<const weights::SafetensorsFile> files);

}  // namespace grove::serving::llm
