#include "serving/llm/decoder_program.h"

#include <algorithm>
#include <vector>

#include "compiler/ir/builder.h"
#include "runtime/decode_attention_kernel.h"
#include "runtime/error.h"
#include "serving/llm/decoder_layers.h"

namespace grove::serving::llm {

namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::zeros_init;
using runtime::DType;

void check_cache(const DecoderConfig& config, const CacheShape& cache) {
  GROVE_CHECK(cache.slots > 0 && cache.max_seq_len > 0, "KV cache of ", cache.slots, " slots x ",
              cache.max_seq_len, " positions: both must be positive");
  GROVE_CHECK(cache.max_seq_len <= config.max_position_embeddings, "KV cache of ",
              cache.max_seq_len, " positions exceeds the model's max_position_embeddings ",
              config.max_position_embeddings, "; lower max_seq_len");
}

struct LayerCaches {
  ValueId key;
  ValueId value;
};

LayerCaches declare_caches(ProgramBuilder& b, const DecoderConfig& config, int64_t layer,
                           int64_t slots, int64_t max_seq_len) {
  runtime::Shape shape{slots, config.num_kv_heads, max_seq_len, config.head_dim()};
  return {b.buffer(key_cache_name(layer), shape, config.dtype, zeros_init()),
          b.buffer(value_cache_name(layer), shape, config.dtype, zeros_init())};
}

}  // namespace

std::string key_cache_name(int64_t layer) {
  return str_cat("grove.llm.layers.", layer, ".key_cache");
}
std::string value_cache_name(int64_t layer) {
  return str_cat("grove.llm.layers.", layer, ".value_cache");
}
std::string qkv_weight_name(int64_t layer) {
  return str_cat("grove.llm.layers.", layer, ".qkv_proj.weight");
}
std::string qkv_bias_name(int64_t layer) {
  return str_cat("grove.llm.layers.", layer, ".qkv_proj.bias");
}
std::string gate_up_weight_name(int64_t layer) {
  return str_cat("grove.llm.layers.", layer, ".gate_up_proj.weight");
}
std::vector<FusedWeightPart> fused_weight_parts(const DecoderConfig& config) {
  std::vector<FusedWeightPart> parts;
  if (config.architecture != Architecture::kLlama) return parts;
  const int64_t q_rows = config.num_heads * config.head_dim();
  const int64_t kv_rows = config.num_kv_heads * config.head_dim();
  const int64_t inner = config.intermediate_size;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string prefix = str_cat("model.layers.", layer, ".");
    const std::string qkv = qkv_weight_name(layer);
    const std::string gate_up = gate_up_weight_name(layer);
    parts.push_back({qkv, prefix + "self_attn.q_proj.weight", 0, q_rows});
    parts.push_back({qkv, prefix + "self_attn.k_proj.weight", q_rows, q_rows + kv_rows});
    parts.push_back(
        {qkv, prefix + "self_attn.v_proj.weight", q_rows + kv_rows, q_rows + 2 * kv_rows});
    if (config.qkv_bias) {  // Note [LLaMA's family]
      const std::string bias = qkv_bias_name(layer);
      parts.push_back({bias, prefix + "self_attn.q_proj.bias", 0, q_rows, true});
      parts.push_back({bias, prefix + "self_attn.k_proj.bias", q_rows, q_rows + kv_rows, true});
      parts.push_back(
          {bias, prefix + "self_attn.v_proj.bias", q_rows + kv_rows, q_rows + 2 * kv_rows, true});
    }
    parts.push_back({gate_up, prefix + "mlp.gate_proj.weight", 0, inner});
    parts.push_back({gate_up, prefix + "mlp.up_proj.weight", inner, 2 * inner});
  }
  return parts;
}

std::vector<std::pair<std::string, runtime::Shape>> checkpoint_weights(
    const DecoderConfig& config) {
  compiler::ir::Program program =
      build_prefill_program(config, {.slots = 1, .max_seq_len = 1}, 1, runtime::kCpuDevice, true);
  std::vector<std::pair<std::string, runtime::Shape>> weights;
  for (const compiler::ir::Value& value : program.values()) {
    if (value.is_persistent() && !is_grove_state_name(value.name)) {
      weights.emplace_back(value.name, value.type.shape);
    }
  }
  for (const FusedWeightPart& part : fused_weight_parts(config)) {
    weights.emplace_back(
        part.name, part.bias ? runtime::Shape{part.row_end - part.row_begin}
                             : runtime::Shape{part.row_end - part.row_begin, config.hidden_size});
  }
  std::sort(weights.begin(), weights.end());
  return weights;
}

bool is_cache_name(const std::string& name) {
  return name.starts_with("grove.llm.layers.") &&
         (name.ends_with(".key_cache") || name.ends_with(".value_cache"));
}
bool is_grove_state_name(const std::string& name) { return name.starts_with("grove."); }

compiler::ir::Program build_prefill_program(const DecoderConfig& config, const CacheShape& cache,
                                            int64_t prompt_length, runtime::Device device,
                                            bool chunk) {
  config.verify();
  check_cache(config, cache);
  GROVE_CHECK(prompt_length > 0 && prompt_length <= cache.max_seq_len, "prefill bucket of ",
              prompt_length, " tokens must lie in [1, ", cache.max_seq_len,
              "] (the cache's positions)");
  ProgramBuilder b(str_cat(architecture_name(config.architecture), chunk ? "_chunk_" : "_prefill_",
                           prompt_length),
                   device);
  ValueId ids = b.input("input_ids", {prompt_length}, DType::kI64);
  ValueId last_index = b.input("last_index", {1}, DType::kI64);
  DecoderLayers layers(b, config, cache);
  ValueId positions = b.slice(layers.positions_table(), 0, 0, prompt_length);
  ValueId slot = compiler::ir::kNoValue;
  ValueId start = compiler::ir::kNoValue;
  if (chunk) {
    // Note [Chunked prefill]: the chunk's tokens sit at positions start..;
    // padding past the cache's end looks up its last position's tables.
    slot = b.input("slot", {1}, DType::kI64);
    start = b.input("start", {1}, DType::kI64);
    ValueId shifted = b.add(positions, start);
    ValueId last = b.full(static_cast<double>(cache.max_seq_len - 1), {}, DType::kI64);
    positions = b.where(b.compare("le", shifted, last), shifted, last);
  }
  ValueId x = layers.embed(ids, positions);
  std::vector<ValueId> new_rows;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    // A whole-prompt prefill reads no cache; a chunk reads its slot's earlier positions.
    LayerCaches caches{compiler::ir::kNoValue, compiler::ir::kNoValue};
    if (chunk) caches = declare_caches(b, config, layer, cache.slots, cache.max_seq_len);
    QueryKeyValue qkv =
        layers.project(layers.block_norm(x, layer, 1), layer, positions, prompt_length);
    ValueId attended =
        chunk ? layers.chunk_attention(qkv, caches.key, caches.value, slot, start, prompt_length)
              : layers.prompt_attention(qkv, prompt_length);
    x = layers.attention_residual(x, attended, layer);
    x = layers.mlp_residual(x, layers.block_norm(x, layer, 2), layer);
    new_rows.push_back(qkv.key);
    new_rows.push_back(qkv.value);
  }
  ValueId last = b.embedding(x, last_index, "last_token");  // [1, hidden]
  b.output(layers.lm_head(layers.final_norm(last)));
  for (ValueId rows : new_rows) b.output(rows);
  return b.build();
}

bool decode_attention_fuses(const DecoderConfig& config, const CacheShape& cache) {
  return config.architecture == Architecture::kLlama &&
         runtime::decode_attention_refusal(config.dtype, config.num_heads, config.num_kv_heads,
                                           config.head_dim(), cache.max_seq_len)
             .empty();
}

compiler::ir::Program build_decode_program(const DecoderConfig& config, const CacheShape& cache,
                                           int64_t batch, runtime::Device device,
                                           bool fused_attention, bool fused_norms) {
  config.verify();
  check_cache(config, cache);
  GROVE_CHECK(batch > 0 && batch <= cache.slots, "decode bucket of ", batch,
              " rows must lie in [1, ", cache.slots, "] (the cache's slots)");
  ProgramBuilder b(str_cat(architecture_name(config.architecture), "_decode_", batch), device);
  ValueId ids = b.input("input_ids", {batch}, DType::kI64);
  ValueId positions = b.input("positions", {batch}, DType::kI64);
  DecoderLayers layers(b, config, cache);
  const bool fused = fused_attention && decode_attention_fuses(config, cache);
  // Note [RMSNorm GEMV]: with the fused attention, each norm and the
  // projection after it are one kernel where the kernel takes the batch.
  if (fused && fused_norms) layers.fuse_norms_into_projections(batch);
  // Table lookups at the positions: GPT-2's learned positions and the unfused
  // rotary embedding (the fused attention reads its tables itself).
  const ValueId lookup = fused ? compiler::ir::kNoValue : layers.clamped_positions(positions);
  ValueId x = layers.embed(ids, lookup);
  std::vector<ValueId> new_rows;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    // Note [KV cache in static buffers]: rows 0..batch-1 are slots 0..batch-1;
    // the program reads the cache and returns the new keys and values.
    LayerCaches caches = declare_caches(b, config, layer, batch, cache.max_seq_len);
    QueryKeyValue qkv;
    ValueId attended;
    if (fused) {
      qkv = layers.fused_cache_attention(x, layer, caches.key, caches.value, positions, batch);
      attended = qkv.query;
    } else {
      qkv = layers.project(layers.block_norm(x, layer, 1), layer, lookup, batch);
      attended = layers.cache_attention(qkv.query, caches.key, caches.value, qkv.key, qkv.value,
                                        positions, batch);
    }
    x = layers.attention_residual(x, attended, layer);
    x = layers.normed_mlp_residual(x, layer);
    new_rows.push_back(qkv.key);
    new_rows.push_back(qkv.value);
  }
  // DecoderLayers::normed_lm_head: the final norm stays its own kernel unless
  // GROVE_FUSED_LM_HEAD=1 (Note [RMSNorm GEMV]: fused into the LM head's 8000
  // blocks it cost more than it saved; streamed, still 97 us more a 1B step).
  b.output(layers.normed_lm_head(x));
  for (ValueId rows : new_rows) b.output(rows);
  return b.build();
}

}  // namespace grove::serving::llm
