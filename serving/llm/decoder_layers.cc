#include "serving/llm/decoder_layers.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "runtime/rms_norm_gemv_kernel.h"

namespace grove::serving::llm {

namespace {

using compiler::ir::kNoValue;
using compiler::ir::zeros_init;
using runtime::DType;

std::string layer_prefix(const DecoderConfig& config, int64_t layer) {
  return config.architecture == Architecture::kLlama ? str_cat("model.layers.", layer, ".")
                                                     : str_cat("transformer.h.", layer, ".");
}

}  // namespace

DecoderLayers::DecoderLayers(compiler::ir::ProgramBuilder& builder, const DecoderConfig& config,
                             const CacheShape& cache)
    : b_(builder), config_(config), cache_(cache), dtype_(config.dtype) {
  positions_table_ = b_.param(kPositionsTable, {cache_.max_seq_len}, DType::kI64, zeros_init());
  if (config_.architecture == Architecture::kLlama) {
    rope_cos_ = b_.param(kRopeCos, {cache_.max_seq_len, config_.head_dim()}, dtype_, zeros_init());
    rope_sin_ = b_.param(kRopeSin, {cache_.max_seq_len, config_.head_dim()}, dtype_, zeros_init());
    rope_rotation_ =
        b_.param(kRopeRotation, {config_.head_dim(), config_.head_dim()}, dtype_, zeros_init());
  }
}

ValueId DecoderLayers::weight(const std::string& name, const runtime::Shape& shape) {
  if (auto existing = b_.program().find_value(name)) return *existing;
  return b_.param(name, shape, dtype_, zeros_init());
}

ValueId DecoderLayers::layer_weight(int64_t layer, const std::string& suffix,
                                    const runtime::Shape& shape) {
  return weight(layer_prefix(config_, layer) + suffix, shape);
}

ValueId DecoderLayers::scalar(double value, DType dtype) { return b_.full(value, {}, dtype); }

ValueId DecoderLayers::clamped_positions(ValueId positions) {
  ValueId zero = scalar(0, DType::kI64);
  return b_.where(b_.compare("ge", positions, zero), positions, zero);
}

ValueId DecoderLayers::embed(ValueId ids, ValueId positions) {
  const int64_t hidden = config_.hidden_size;
  if (config_.architecture == Architecture::kLlama) {
    return b_.embedding(weight("model.embed_tokens.weight", {config_.vocab_size, hidden}), ids,
                        "embed_tokens");
  }
  ValueId tokens =
      b_.embedding(weight("transformer.wte.weight", {config_.vocab_size, hidden}), ids, "wte");
  ValueId places =
      b_.embedding(weight("transformer.wpe.weight", {config_.max_position_embeddings, hidden}),
                   positions, "wpe");
  return b_.add(tokens, places);
}

ValueId DecoderLayers::block_norm(ValueId x, int64_t layer, int which) {
  const int64_t hidden = config_.hidden_size;
  if (config_.architecture == Architecture::kGpt2) {
    std::string norm = which == 1 ? "ln_1" : "ln_2";
    return b_.layer_norm(x, layer_weight(layer, norm + ".weight", {hidden}),
                         layer_weight(layer, norm + ".bias", {hidden}), config_.norm_eps);
  }
  std::string norm = which == 1 ? "input_layernorm" : "post_attention_layernorm";
  return rms_norm(x, layer_weight(layer, norm + ".weight", {hidden}));
}

ValueId DecoderLayers::norm_weight(int64_t layer, int which) {
  const int64_t hidden = config_.hidden_size;
  if (layer < 0) return weight("model.norm.weight", {hidden});
  return layer_weight(
      layer, which == 1 ? "input_layernorm.weight" : "post_attention_layernorm.weight", {hidden});
}

void DecoderLayers::fuse_norms_into_projections(int64_t rows) {
  fuse_norms_ = config_.architecture == Architecture::kLlama &&
                runtime::rms_norm_gemv_refusal(dtype_, rows, config_.hidden_size).empty();
}

ValueId DecoderLayers::normed_linear(ValueId x, ValueId norm_weight_value, ValueId w,
                                     const std::string& name) {
  if (!fuse_norms_) return b_.linear(rms_norm(x, norm_weight_value), w, kNoValue, name);
  compiler::ir::Attributes attrs;
  attrs.set("eps", config_.norm_eps);
  return b_.op1("rms_norm_linear", {x, norm_weight_value, w}, attrs, name);
}

ValueId DecoderLayers::rms_norm(ValueId x, ValueId weight_value) {
  // HF's LlamaRMSNorm (in f32, back to the model dtype, times the weight) as
  // one row kernel: the rms_norm op (compiler/ops/rms_norm_op.cc), whose
  // arithmetic is that of the primitives it replaces (two kernels).
  compiler::ir::Attributes attrs;
  attrs.set("eps", config_.norm_eps);
  return b_.op1("rms_norm", {x, weight_value}, attrs);
}

ValueId DecoderLayers::final_norm(ValueId x) {
  const int64_t hidden = config_.hidden_size;
  if (config_.architecture == Architecture::kGpt2) {
    return b_.layer_norm(x, weight("transformer.ln_f.weight", {hidden}),
                         weight("transformer.ln_f.bias", {hidden}), config_.norm_eps);
  }
  return rms_norm(x, weight("model.norm.weight", {hidden}));
}

ValueId DecoderLayers::normed_lm_head(ValueId x) {
  const char* setting = std::getenv("GROVE_FUSED_LM_HEAD");
  const bool fused = fuse_norms_ && dtype_ == DType::kBF16 && setting != nullptr &&
                     std::string_view(setting) == "1";
  if (!fused) return lm_head(final_norm(x));
  compiler::ir::Attributes attrs;
  attrs.set("eps", config_.norm_eps);
  attrs.set("out_dtype", std::string("f32"));
  return b_.op1("rms_norm_linear", {x, norm_weight(-1, 0), lm_head_table()}, attrs, "lm_head");
}

// GPT-2's Conv1D: y = x @ W + b with W stored [in, out] (transposed against nn.Linear).
ValueId DecoderLayers::conv1d(ValueId x, int64_t layer, const std::string& module, int64_t in,
                              int64_t out) {
  ValueId w = layer_weight(layer, module + ".weight", {in, out});
  ValueId bias = layer_weight(layer, module + ".bias", {out});
  return b_.add(b_.matmul(x, w), bias);
}

ValueId DecoderLayers::rotate(ValueId x, ValueId rotated, ValueId cos, ValueId sin, int64_t heads,
                              int64_t rows) {
  // HF's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin.
  const int64_t d = config_.head_dim();
  return b_.add(b_.mul(b_.reshape(x, {rows, heads, d}), cos),
                b_.mul(b_.reshape(rotated, {rows, heads, d}), sin));
}

ValueId DecoderLayers::family_projection(ValueId fused, int64_t layer, int64_t rows) {
  const int64_t d = config_.head_dim();
  const int64_t q_width = config_.num_heads * d;
  const int64_t kv_width = config_.num_kv_heads * d;
  if (config_.qkv_bias) {
    fused = b_.add(fused, weight(qkv_bias_name(layer), {q_width + 2 * kv_width}));
  }
  if (!config_.qk_norm) return fused;
  // HF's Qwen3: q_norm / k_norm, LLaMA's RMSNorm over each head's d values.
  auto heads_normed = [&](int64_t begin, int64_t width, const std::string& norm) {
    ValueId part = b_.reshape(b_.slice(fused, 1, begin, begin + width), {rows * width / d, d});
    return b_.reshape(rms_norm(part, layer_weight(layer, "self_attn." + norm + ".weight", {d})),
                      {rows, width});
  };
  return b_.concat({heads_normed(0, q_width, "q_norm"), heads_normed(q_width, kv_width, "k_norm"),
                    b_.slice(fused, 1, q_width + kv_width, q_width + 2 * kv_width)},
                   1);
}

QueryKeyValue DecoderLayers::project(ValueId x, int64_t layer, ValueId positions, int64_t rows) {
  const int64_t hidden = config_.hidden_size;
  const int64_t d = config_.head_dim();
  const int64_t heads = config_.num_heads;
  const int64_t kv_heads = config_.num_kv_heads;
  QueryKeyValue qkv;
  if (config_.architecture == Architecture::kGpt2) {
    ValueId fused = conv1d(x, layer, "attn.c_attn", hidden, 3 * hidden);
    qkv.query = b_.reshape(b_.slice(fused, 1, 0, hidden), {rows, heads, d});
    qkv.key = b_.reshape(b_.slice(fused, 1, hidden, 2 * hidden), {rows, heads, d});
    qkv.value = b_.reshape(b_.slice(fused, 1, 2 * hidden, 3 * hidden), {rows, heads, d});
    return qkv;
  }
  // Note [Fused projection weights]: one GEMM for q, k and v.
  const int64_t q_width = heads * d;
  const int64_t kv_width = kv_heads * d;
  ValueId fused = family_projection(
      b_.linear(x, weight(qkv_weight_name(layer), {q_width + 2 * kv_width, hidden}), kNoValue),
      layer, rows);
  ValueId q = b_.slice(fused, 1, 0, q_width);
  ValueId k = b_.slice(fused, 1, q_width, q_width + kv_width);
  ValueId v = b_.slice(fused, 1, q_width + kv_width, q_width + 2 * kv_width);
  // Note [Rotate-half as a GEMM]: rotate_half of every query and key head
  // ([-x2, x1]) in one product with the signed permutation kRopeRotation. It
  // takes the value heads along (unused): the whole product is a view of the
  // GEMM's output at any batch, where a slice of it would be copied first.
  const int64_t all_heads = heads + 2 * kv_heads;
  ValueId rotated =
      b_.reshape(b_.linear(b_.reshape(fused, {rows * all_heads, d}), rope_rotation_, kNoValue),
                 {rows, all_heads * d});
  ValueId q_rotated = b_.slice(rotated, 1, 0, q_width);
  ValueId k_rotated = b_.slice(rotated, 1, q_width, q_width + kv_width);
  // The rotary tables at these positions, once per program (every layer reads them).
  if (rope_positions_ != positions) {
    rope_positions_ = positions;
    rope_cos_rows_ = b_.reshape(b_.embedding(rope_cos_, positions), {rows, 1, d});
    rope_sin_rows_ = b_.reshape(b_.embedding(rope_sin_, positions), {rows, 1, d});
  }
  ValueId cos = rope_cos_rows_;
  ValueId sin = rope_sin_rows_;
  qkv.query = rotate(q, q_rotated, cos, sin, heads, rows);
  qkv.key = rotate(k, k_rotated, cos, sin, kv_heads, rows);
  qkv.value = b_.reshape(v, {rows, kv_heads, d});
  return qkv;
}

ValueId DecoderLayers::output_projection(ValueId attended, int64_t layer) {
  const int64_t hidden = config_.hidden_size;
  const int64_t inner = config_.num_heads * config_.head_dim();
  if (config_.architecture == Architecture::kGpt2) {
    return conv1d(attended, layer, "attn.c_proj", inner, hidden);
  }
  return b_.linear(attended, layer_weight(layer, "self_attn.o_proj.weight", {hidden, inner}),
                   kNoValue);
}

ValueId DecoderLayers::mlp(ValueId x, int64_t layer) {
  const int64_t hidden = config_.hidden_size;
  const int64_t inner = config_.intermediate_size;
  if (config_.architecture == Architecture::kGpt2) {
    ValueId h = b_.gelu(conv1d(x, layer, "mlp.c_fc", hidden, inner));
    return conv1d(h, layer, "mlp.c_proj", inner, hidden);
  }
  return b_.linear(swiglu(x, layer), layer_weight(layer, "mlp.down_proj.weight", {hidden, inner}),
                   kNoValue);
}

ValueId DecoderLayers::swiglu(ValueId x, int64_t layer) {
  const int64_t inner = config_.intermediate_size;
  // Note [Fused projection weights]: one GEMM for gate and up.
  ValueId gate_up =
      b_.linear(x, weight(gate_up_weight_name(layer), {2 * inner, config_.hidden_size}), kNoValue);
  ValueId gate = b_.slice(gate_up, 1, 0, inner);
  ValueId up = b_.slice(gate_up, 1, inner, 2 * inner);
  return b_.mul(b_.mul(gate, b_.sigmoid(gate)), up);
}

ValueId DecoderLayers::attention_residual(ValueId x, ValueId attended, int64_t layer) {
  if (config_.architecture == Architecture::kGpt2) {
    return b_.add(x, output_projection(attended, layer));
  }
  const int64_t inner = config_.num_heads * config_.head_dim();
  return b_.op1(
      "linear_residual",
      {x, attended, layer_weight(layer, "self_attn.o_proj.weight", {config_.hidden_size, inner})});
}

ValueId DecoderLayers::mlp_residual(ValueId x, ValueId normed, int64_t layer) {
  if (config_.architecture == Architecture::kGpt2) return b_.add(x, mlp(normed, layer));
  return b_.op1("linear_residual",
                {x, swiglu(normed, layer),
                 layer_weight(layer, "mlp.down_proj.weight",
                              {config_.hidden_size, config_.intermediate_size})});
}

ValueId DecoderLayers::lm_head_table() {
  if (config_.architecture == Architecture::kGpt2) {
    return weight("transformer.wte.weight", {config_.vocab_size, config_.hidden_size});
  }
  if (config_.tie_word_embeddings) {
    return weight("model.embed_tokens.weight", {config_.vocab_size, config_.hidden_size});
  }
  return weight("lm_head.weight", {config_.vocab_size, config_.hidden_size});
}

ValueId DecoderLayers::lm_head(ValueId x) {
  ValueId logits = b_.linear(x, lm_head_table(), kNoValue, "lm_head");
  return dtype_ == DType::kF32 ? logits : b_.cast(logits, DType::kF32);
}

ValueId DecoderLayers::normed_mlp_residual(ValueId x, int64_t layer) {
  if (!fuse_norms_) return mlp_residual(x, block_norm(x, layer, 2), layer);
  compiler::ir::Attributes attrs;
  attrs.set("eps", config_.norm_eps);
  ValueId gated = b_.op1(
      "rms_norm_swiglu",
      {x, norm_weight(layer, 2),
       weight(gate_up_weight_name(layer), {2 * config_.intermediate_size, config_.hidden_size})},
      attrs);
  return b_.op1("linear_residual",
                {x, gated,
                 layer_weight(layer, "mlp.down_proj.weight",
                              {config_.hidden_size, config_.intermediate_size})});
}

ValueId DecoderLayers::masked_softmax(ValueId scores, ValueId keep) {
  ValueId scaled = b_.mul(scores, scalar(1.0 / std::sqrt(double(config_.head_dim())), dtype_));
  ValueId scores32 = dtype_ == DType::kF32 ? scaled : b_.cast(scaled, DType::kF32);
  ValueId masked =
      b_.where(keep, scores32, scalar(std::numeric_limits<float>::lowest(), DType::kF32));
  ValueId probabilities = b_.softmax(masked, -1);
  return dtype_ == DType::kF32 ? probabilities : b_.cast(probabilities, dtype_);
}

ValueId DecoderLayers::prompt_attention(const QueryKeyValue& qkv, int64_t rows) {
  const int64_t d = config_.head_dim();
  const int64_t kv_heads = config_.num_kv_heads;
  const int64_t groups = config_.query_groups();
  // Query head h reads kv head h / groups: [kv, groups * rows, d] against [kv, rows, d].
  ValueId q = b_.reshape(b_.permute(qkv.query, {1, 0, 2}), {kv_heads, groups * rows, d});
  ValueId k = b_.permute(qkv.key, {1, 0, 2});
  ValueId v = b_.permute(qkv.value, {1, 0, 2});
  ValueId scores = b_.reshape(b_.matmul(q, b_.transpose(k, 1, 2)), {kv_heads, groups, rows, rows});
  ValueId index = b_.slice(positions_table_, 0, 0, rows);
  ValueId causal = b_.compare("le", b_.reshape(index, {1, rows}), b_.reshape(index, {rows, 1}));
  ValueId probabilities =
      b_.reshape(masked_softmax(scores, causal), {kv_heads, groups * rows, rows});
  ValueId attended = b_.reshape(b_.matmul(probabilities, v), {config_.num_heads, rows, d});
  return b_.reshape(b_.permute(attended, {1, 0, 2}), {rows, config_.num_heads * d});
}

ValueId DecoderLayers::cache_attention(ValueId query, ValueId key_cache, ValueId value_cache,
                                       ValueId new_key, ValueId new_value, ValueId positions,
                                       int64_t rows) {
  const int64_t d = config_.head_dim();
  const int64_t kv_heads = config_.num_kv_heads;
  const int64_t groups = config_.query_groups();
  const int64_t length = cache_.max_seq_len;
  ValueId q = b_.reshape(query, {rows, kv_heads, groups, d});
  // Scores against the cache [rows, kv, groups, T] and against the row's own
  // new key [rows, kv, groups, 1], side by side (Note [KV cache in static buffers]).
  ValueId cached = b_.matmul(q, b_.transpose(key_cache, 2, 3));
  ValueId own = b_.matmul(q, b_.reshape(new_key, {rows, kv_heads, d, 1}));
  ValueId scores = b_.concat({cached, own}, 3);
  // Cache positions t < position are the row's past; index T (the own key)
  // carries -1, kept for every real row. The mask is made once per program:
  // every layer's attention reads it.
  if (keep_positions_ != positions) {
    keep_positions_ = positions;
    ValueId index = b_.concat({positions_table_, b_.full(-1, {1}, DType::kI64)}, 0);
    keep_ = b_.compare("lt", b_.reshape(index, {1, 1, 1, length + 1}),
                       b_.reshape(positions, {rows, 1, 1, 1}));
  }
  ValueId probabilities = masked_softmax(scores, keep_);
  ValueId from_cache = b_.matmul(b_.slice(probabilities, 3, 0, length), value_cache);
  // The own value's share is an outer product over one position: a
  // broadcast multiply (fused with the add below) instead of a K = 1 GEMM.
  ValueId from_own = b_.mul(b_.slice(probabilities, 3, length, length + 1),
                            b_.reshape(new_value, {rows, kv_heads, 1, d}));
  ValueId attended = b_.add(from_cache, from_own);  // [rows, kv, groups, d]
  return b_.reshape(attended, {rows, config_.num_heads * d});
}

QueryKeyValue DecoderLayers::fused_cache_attention(ValueId x, int64_t layer, ValueId key_cache,
                                                   ValueId value_cache, ValueId positions,
                                                   int64_t rows) {
  const int64_t d = config_.head_dim();
  const int64_t heads = config_.num_heads;
  const int64_t kv_heads = config_.num_kv_heads;
  const int64_t q_width = heads * d;
  const int64_t kv_width = kv_heads * d;
  ValueId fused = family_projection(
      normed_linear(x, norm_weight(layer, 1),
                    weight(qkv_weight_name(layer), {q_width + 2 * kv_width, config_.hidden_size})),
      layer, rows);
  // The kernel reads the rotary tables at each row's position itself.
  ValueId result =
      b_.op1("decode_attention", {fused, rope_cos_, rope_sin_, key_cache, value_cache, positions},
             {{"heads", heads}}, str_cat("attention_", layer));
  QueryKeyValue out;
  out.query = b_.slice(result, 1, 0, q_width);
  out.key = b_.reshape(b_.slice(result, 1, q_width, q_width + kv_width), {rows, kv_heads, d});
  out.value = b_.reshape(b_.slice(result, 1, q_width + kv_width, q_width + 2 * kv_width),
                         {rows, kv_heads, d});
  return out;
}

ValueId DecoderLayers::chunk_attention(const QueryKeyValue& qkv, ValueId key_cache,
                                       ValueId value_cache, ValueId slot, ValueId start,
                                       int64_t rows) {
  const int64_t d = config_.head_dim();
  const int64_t kv_heads = config_.num_kv_heads;
  const int64_t groups = config_.query_groups();
  const int64_t length = cache_.max_seq_len;
  // Query head h reads kv head h / groups: [kv, groups * rows, d] against
  // [kv, T + rows, d], the slot's cache (gathered: one row of the cache
  // viewed as [slots, kv * T * d]) and then the chunk's own keys.
  ValueId q = b_.reshape(b_.permute(qkv.query, {1, 0, 2}), {kv_heads, groups * rows, d});
  auto slot_rows = [&](ValueId cache) {
    return b_.reshape(b_.embedding(b_.reshape(cache, {cache_.slots, kv_heads * length * d}), slot),
                      {kv_heads, length, d});
  };
  ValueId k = b_.concat({slot_rows(key_cache), b_.permute(qkv.key, {1, 0, 2})}, 1);
  ValueId v = b_.concat({slot_rows(value_cache), b_.permute(qkv.value, {1, 0, 2})}, 1);
  ValueId scores =
      b_.reshape(b_.matmul(q, b_.transpose(k, 1, 2)), {kv_heads, groups, rows, length + rows});
  // Cache positions t < start are the earlier chunks; then causal over the chunk.
  ValueId index = b_.slice(positions_table_, 0, 0, rows);
  ValueId starts = b_.add(b_.full(0, {rows, 1}, DType::kI64), b_.reshape(start, {1, 1}));
  ValueId earlier = b_.compare("lt", b_.reshape(positions_table_, {1, length}), starts);
  ValueId causal = b_.compare("le", b_.reshape(index, {1, rows}), b_.reshape(index, {rows, 1}));
  ValueId keep = b_.concat({earlier, causal}, 1);  // [rows, T + rows]
  ValueId probabilities =
      b_.reshape(masked_softmax(scores, keep), {kv_heads, groups * rows, length + rows});
  ValueId attended = b_.reshape(b_.matmul(probabilities, v), {config_.num_heads, rows, d});
  return b_.reshape(b_.permute(attended, {1, 0, 2}), {rows, config_.num_heads * d});
}

}  // namespace grove::serving::llm
