// DecoderLayers adds the pieces of a LLaMA or GPT-2 decoder to a
// ProgramBuilder, with the Hugging Face names of their weights: embeddings,
// norms, the attention projections with the rotary embedding, the KV-cache
// attention of prefill and decode, the MLP and the LM head. Rows are tokens:
// every activation is [rows, features] (a prefill's prompt positions, or a
// decode step's batch). Internal to serving/llm (decoder_program.cc).
#pragma once

#include <string>

#include "compiler/ir/builder.h"
#include "serving/llm/decoder_config.h"
#include "serving/llm/decoder_program.h"

namespace grove::serving::llm {

using compiler::ir::ValueId;

// Queries, keys and values of one layer: [rows, heads, head_dim].
struct QueryKeyValue {
  ValueId query = compiler::ir::kNoValue;
  ValueId key = compiler::ir::kNoValue;
  ValueId value = compiler::ir::kNoValue;
};

class DecoderLayers {
 public:
  DecoderLayers(compiler::ir::ProgramBuilder& builder, const DecoderConfig& config,
                const CacheShape& cache);

  // Token embeddings (plus GPT-2's learned positions) of `ids` [rows] at
  // `positions` [rows] (i64, clamped to >= 0).
  ValueId embed(ValueId ids, ValueId positions);
  // The block input norm of layer `layer` (`which`: 1 before attention, 2 before the MLP).
  ValueId block_norm(ValueId x, int64_t layer, int which);
  ValueId final_norm(ValueId x);
  // The logits (f32) of the last hidden states: lm_head(final_norm(x)); with
  // fused norms (bf16) and GROVE_FUSED_LM_HEAD=1 one rms_norm_linear kernel
  // widening to f32 (Note [Streamed GEMV]). Off by default: with the
  // normalization redone per weight vector it made the 1B step 97 us slower
  // (H100, session 18 round 1).
  ValueId normed_lm_head(ValueId x);
  // Projections of layer `layer`, with the rotary embedding (LLaMA) at `positions`.
  QueryKeyValue project(ValueId x, int64_t layer, ValueId positions, int64_t rows);
  // The attention output projection of [rows, heads * head_dim].
  ValueId output_projection(ValueId attended, int64_t layer);
  ValueId mlp(ValueId x, int64_t layer);
  // x + output_projection(attended) and x + mlp(normed): for LLaMA the last
  // projection accumulates into x in place (the linear_residual op, one GEMM
  // instead of a GEMM and an add kernel); GPT-2 adds.
  ValueId attention_residual(ValueId x, ValueId attended, int64_t layer);
  ValueId mlp_residual(ValueId x, ValueId normed, int64_t layer);
  // f32 logits [rows, vocab].
  ValueId lm_head(ValueId x);

  // Prefill attention: causal over the prompt itself; [rows, heads * head_dim].
  ValueId prompt_attention(const QueryKeyValue& qkv, int64_t rows);
  // Decode attention of each row over its slot's cache before its position
  // and its own new key and value ([rows, kv_heads, head_dim], not yet in the cache).
  ValueId cache_attention(ValueId query, ValueId key_cache, ValueId value_cache, ValueId new_key,
                          ValueId new_value, ValueId positions, int64_t rows);
  // Note [Decode attention kernel] (runtime/decode_attention_kernel.h): the
  // qkv projection of layer `layer`'s input norm of `x` and cache_attention's
  // result in one kernel after it (LLaMA): query = the attended heads [rows,
  // heads * head_dim], key and value the new rotated key and value [rows,
  // kv_heads, head_dim].
  QueryKeyValue fused_cache_attention(ValueId x, int64_t layer, ValueId key_cache,
                                      ValueId value_cache, ValueId positions, int64_t rows);
  // Note [RMSNorm GEMV] (runtime/rms_norm_gemv_kernel.h): from now on, LLaMA
  // norms feeding a projection (normed_linear) run as one rms_norm_linear
  // kernel where it takes `rows` rows.
  void fuse_norms_into_projections(int64_t rows);
  // x + mlp(block_norm(x, layer, 2)); with fused norms one rms_norm_swiglu
  // kernel (norm, gate/up and SwiGLU) and the down projection (LLaMA).
  ValueId normed_mlp_residual(ValueId x, int64_t layer);
  // A prefill chunk's attention (Note [Chunked prefill]): the chunk's
  // queries at positions start.. over `slot`'s cache before `start` (the
  // earlier chunks, in the full caches [slots, kv_heads, T, head_dim]) and
  // causally over the chunk's own keys and values; [rows, heads * head_dim].
  ValueId chunk_attention(const QueryKeyValue& qkv, ValueId key_cache, ValueId value_cache,
                          ValueId slot, ValueId start, int64_t rows);

  // A nonnegative copy of positions (padding rows have -1) for table lookups.
  ValueId clamped_positions(ValueId positions);
  ValueId positions_table() const { return positions_table_; }

 private:
  ValueId weight(const std::string& name, const runtime::Shape& shape);
  ValueId layer_weight(int64_t layer, const std::string& suffix, const runtime::Shape& shape);
  ValueId scalar(double value, runtime::DType dtype);
  ValueId rms_norm(ValueId x, ValueId weight_value);
  // Note [LLaMA's family]: the fused projection [rows, q + 2 kv] with the
  // family's q, k, v bias added and its query and key heads normalized.
  ValueId family_projection(ValueId fused, int64_t layer, int64_t rows);
  // x * cos + rotated * sin per head, `rotated` being rotate_half(x).
  ValueId rotate(ValueId x, ValueId rotated, ValueId cos, ValueId sin, int64_t heads, int64_t rows);
  // Scores [..., n] scaled, masked where `keep` is false, softmax in f32, back in the model dtype.
  ValueId masked_softmax(ValueId scores, ValueId keep);
  ValueId conv1d(ValueId x, int64_t layer, const std::string& module, int64_t in, int64_t out);
  // LLaMA's gated MLP input silu(gate) * up of x [rows, intermediate].
  ValueId swiglu(ValueId x, int64_t layer);
  // linear(norm(x), w) for a LLaMA norm weight: one rms_norm_linear op when
  // fuse_norms_into_projections allowed it, else rms_norm then linear.
  ValueId normed_linear(ValueId x, ValueId norm_weight, ValueId w, const std::string& name = "");
  ValueId norm_weight(int64_t layer, int which);  // layer -1: the final norm
  ValueId lm_head_table();

  compiler::ir::ProgramBuilder& b_;
  const DecoderConfig& config_;
  CacheShape cache_;
  runtime::DType dtype_;
  ValueId positions_table_ = compiler::ir::kNoValue;
  ValueId rope_cos_ = compiler::ir::kNoValue;
  ValueId rope_sin_ = compiler::ir::kNoValue;
  ValueId rope_rotation_ = compiler::ir::kNoValue;  // Note [Rotate-half as a GEMM]
  bool fuse_norms_ = false;                         // Note [RMSNorm GEMV]
  // What project() and cache_attention() computed for the last positions
  // they saw, reused by every later layer of the program.
  ValueId rope_positions_ = compiler::ir::kNoValue;
  ValueId rope_cos_rows_ = compiler::ir::kNoValue;
  ValueId rope_sin_rows_ = compiler::ir::kNoValue;
  ValueId keep_positions_ = compiler::ir::kNoValue;
  ValueId keep_ = compiler::ir::kNoValue;
};

}  // namespace grove::serving::llm
