// The grove Programs of a decoder-only language model over a KV cache held in
// static device buffers: one prefill program per prompt-length bucket and one
// decode program per batch bucket. Weights are params named as in the Hugging
// Face checkpoint; the cache and grove's tables are state named "grove.llm.*".
//
//   Program prefill = build_prefill_program(config, cache, 16, device);
//     inputs: input_ids i64 [16] (padded), last_index i64 [1]
//     outputs: logits f32 [1, vocab] of the token at last_index, then per
//              layer the new key and value [16, kv_heads, head_dim] (written
//              into the cache by kv_write_span, decode_kernels.h)
//   Program chunk = build_prefill_program(config, cache, 16, device, /*chunk=*/true);
//     inputs: as prefill, then slot i64 [1] and start i64 [1] (Note [Chunked prefill])
//   Program decode = build_decode_program(config, cache, 4, device);
//     inputs: input_ids i64 [4], positions i64 [4] (-1: a padding row)
//     outputs: logits f32 [4, vocab], then per layer the new key and value
//              [4, kv_heads, head_dim] (written into the cache by kv_write, decode_kernels.h)
//
// Note [KV cache in static buffers]
// Each layer's keys and values live in two buffers of shape
// [slots, kv_heads, max_seq_len, head_dim]: static inputs to the tree manager
// (ARCHITECTURE.md 4.4 (b)), never copied. A decode program for batch bucket
// b declares its cache as [b, ...] and is bound to the first b slots of the
// full cache (a contiguous view at the same address), so decode row i is
// slot i and no gather of the cache is needed. The decode program only reads
// the cache: row i attends over positions t < positions[i] of slot i and over
// its own new key and value, which the program returns; the kv-write kernel
// (decode_kernels.h) then stores them at positions[i], one position per row
// and layer, after the program in stream order (inside the same graph for
// DecodeLoop). A position of -1 writes nothing, so padding rows leave the
// cache alone. A prefill returns its keys and values too, and kv_write_span
// stores them at the prompt's positions of its slot with zeros after them
// (Note [Prefill cache writes], decode_kernels.h; warm-up writes nothing). Tests:
// DecoderGraphs.DecodeWritesTheCacheInPlaceWithoutCopies,
// DecoderGraphs.WarmUpLeavesTheCacheUntouched
// (tests/serving/llm/decoder_test.cc), DecodeLoopTest.DecodeWritesOnlyEachRowsPosition
// (tests/serving/llm/decode_loop_test.cc).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/program.h"
#include "serving/llm/decoder_config.h"

namespace grove::serving::llm {

// The cache every program of one model shares.
struct CacheShape {
  int64_t slots = 1;        // requests that can hold a cache at once (the largest batch bucket)
  int64_t max_seq_len = 1;  // positions per request (prompt and generated tokens)
};

// Names of grove's own state in decoder programs (never read from checkpoints).
inline constexpr const char* kPositionsTable = "grove.llm.positions";  // i64 [max_seq_len]: 0..T-1
inline constexpr const char* kRopeCos = "grove.llm.rope_cos";  // [max_seq_len, head_dim] (LLaMA)
inline constexpr const char* kRopeSin = "grove.llm.rope_sin";
// Note [Rotate-half as a GEMM]: HF's rotate_half(x) = [-x2, x1] of a head x
// [head_dim] is x R^T for the signed permutation R [head_dim, head_dim]
// (R[j][j + d/2] = -1 and R[j + d/2][j] = 1), so a step rotates every query
// and key head of a layer with one small GEMM (rows (heads + kv_heads) per
// token, K = head_dim) instead of slices, a negation and a concat per
// projection (several kernels each). Products with 0 and +-1 summed in f32
// are exact: the result is rotate_half's bit for bit. Tests: the decoder
// tests against their references (tests/serving/llm/decoder_test.cc) and
// DecoderState.RopeRotationIsRotateHalf (checkpoint_test.cc). (LLaMA)
inline constexpr const char* kRopeRotation = "grove.llm.rope_rotation";
std::string key_cache_name(int64_t layer);    // "grove.llm.layers.N.key_cache"
std::string value_cache_name(int64_t layer);  // "grove.llm.layers.N.value_cache"
bool is_cache_name(const std::string& name);
// Note [Fused projection weights]: a LLaMA layer's q, k and v projections
// are one weight [q; k; v] ([(heads + 2 kv_heads) * head_dim, hidden]) and its
// gate and up projections one weight [gate; up] ([2 * intermediate, hidden]),
// so a step runs one GEMM for each group (fewer launches, and a wider N that
// reads the weights at a better bandwidth at small M). The programs use these
// fused params; DecoderState keeps the checkpoint's tensors (q_proj, ...) as
// views of them (same memory), so checkpoints load unchanged. Tests:
// DecoderState.FusedProjectionsAreViewsOfTheCheckpointWeights
// (tests/serving/llm/checkpoint_test.cc) and every decoder test against its reference.
// Qwen2's q, k and v biases (Note [LLaMA's family]) are one [q; k; v] bias likewise.
std::string qkv_weight_name(int64_t layer);      // "grove.llm.layers.N.qkv_proj.weight"
std::string qkv_bias_name(int64_t layer);        // "grove.llm.layers.N.qkv_proj.bias"
std::string gate_up_weight_name(int64_t layer);  // "grove.llm.layers.N.gate_up_proj.weight"

// A checkpoint tensor that is rows [row_begin, row_end) of a fused weight
// (elements, of a fused bias).
struct FusedWeightPart {
  std::string fused;  // qkv_weight_name, qkv_bias_name or gate_up_weight_name
  std::string name;   // the checkpoint's name, e.g. "model.layers.0.self_attn.k_proj.weight"
  int64_t row_begin = 0;
  int64_t row_end = 0;
  bool bias = false;  // a 1-d part of qkv_bias_name
};
// Every such part of `config`'s fused weights (none for GPT-2).
std::vector<FusedWeightPart> fused_weight_parts(const DecoderConfig& config);

// The tensors a Hugging Face checkpoint of `config` holds (the programs'
// params that are not grove state, and the parts of the fused weights), with
// their shapes, sorted by name.
std::vector<std::pair<std::string, runtime::Shape>> checkpoint_weights(const DecoderConfig& config);
bool is_grove_state_name(const std::string& name);  // starts with "grove."

// Note [Chunked prefill]
// A long prompt's prefill may run as chunks, one per scheduling turn
// (GeneratorOptions::prefill_chunk), so a turn's prefill work is bounded by
// the chunk and the running streams wait for one chunk, not a whole prompt.
// A chunk program (chunk = true) takes the chunk's tokens at positions
// start..start+n-1 of `slot`: its queries attend over the slot's cache at
// positions < start (the earlier chunks, already written there by
// kv_write_span) and causally over the chunk itself, with the same masked
// softmax as a whole prompt's (masked positions weigh exactly 0). Its keys
// and values go into the cache like a prefill's. The first chunk of a prompt
// is an ordinary prefill. Tests: DecoderChunks.* (tests/serving/llm/decoder_test.cc),
// Generator.ChunkedPrefillGivesTheWholePromptTokens (generator_test.cc).
compiler::ir::Program build_prefill_program(const DecoderConfig& config, const CacheShape& cache,
                                            int64_t prompt_length, runtime::Device device,
                                            bool chunk = false);
// `fused_norms` (with the fused attention): each norm and the projection
// after it as one kernel where it takes the batch (Note [RMSNorm GEMV]).
// `fused_attention`: each LLaMA layer's attention as the decode_attention op
// (Note [Decode attention kernel], runtime/decode_attention_kernel.h) where
// its kernel takes the shape; false: as the unfused ops (GPT-2 always).
compiler::ir::Program build_decode_program(const DecoderConfig& config, const CacheShape& cache,
                                           int64_t batch, runtime::Device device,
                                           bool fused_attention = true, bool fused_norms = true);
// Whether build_decode_program's attention for `config` and `cache` is the
// decode_attention op when asked for.
bool decode_attention_fuses(const DecoderConfig& config, const CacheShape& cache);

}  // namespace grove::serving::llm
