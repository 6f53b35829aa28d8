// Decoder runs a decoder-only language model as grove programs: one prefill
// per prompt-length bucket and one decode step per batch bucket, all compiled
// into one execution backend (with "cudagraphs": one tree, one pool) over one
// DecoderState, so every bucket reads and writes the same KV cache in place.
//
//   auto decoder = Decoder::load("models/tiny-llama", {.backend = "cudagraphs"});
//   decoder->warm_up();                                  // records every bucket, largest first
//   std::vector<float> logits = decoder->prefill(0, prompt);  // slot 0
//   auto step = decoder->decode({{.slot = 0, .token = next, .position = prompt.size()}});
//
// Note [Decode buckets share one pool]
// A decode step for the slots in use runs the program of the smallest batch
// bucket covering the highest slot (rows of free slots are padding, position
// -1, Note [KV cache in static buffers]). warm_up() calls every decode bucket
// twice (warm-up, recording) from the largest down, then every prefill bucket
// the same way, so the smaller recordings reuse the pool blocks of the largest
// (ARCHITECTURE.md 4.2) and no bucket records again while serving: each
// top-level call is its own generation whose logits are copied to the host
// before the next call, so every recorded node hangs off the root. Tests:
// DecoderGraphs.EachBucketRecordsOnceThenReplays (tests/serving/llm/decoder_test.cc).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "serving/llm/decoder_state.h"

namespace grove::serving::llm {

struct DecoderOptions {
  std::string backend = "cudagraphs";
  std::optional<runtime::Device> device;  // default_device() when unset
  // Positions per request; 0: the model's max_position_embeddings, at most 256.
  int64_t max_seq_len = 0;
  std::vector<int64_t> batch_buckets = {1, 2, 4, 8};  // the largest is the cache's slot count
  // Empty: powers of two from 8 up to max_seq_len, and max_seq_len itself.
  std::vector<int64_t> prompt_buckets;
  // Decode attention as one kernel per layer (Note [Decode attention
  // kernel]) where it takes the model; false: the unfused ops.
  bool fused_attention = true;
  // Note [RMSNorm GEMV]: with the fused attention, each norm and the
  // projection after it as one kernel where it takes the batch; false: apart.
  bool fused_norms = true;
  // Note [Chunked prefill]: warm_up also records the chunk programs (one per
  // prompt bucket), so prefill_chunk records nothing while serving.
  bool chunked_prefill = false;
  // Grove's small-M GEMM kernel for the prefill programs (chunks included)
  // and for the decode programs: "off", "on" or "auto" (CompileOptions::small_m_gemm,
  // Note [Small-M GEMM selection]); empty: GROVE_SMALL_M_GEMM decides.
  std::string prefill_small_m_gemm;
  std::string decode_small_m_gemm;
  // Decoder::load: the dtype to run in, whatever config.json says (a float16
  // checkpoint, which grove cannot run as float16, in float32 or bfloat16);
  // unset: the checkpoint's own.
  std::optional<runtime::DType> dtype;
};

// One row of a decode step: feed `token` at `position` of `slot`'s sequence.
struct DecodeRow {
  int64_t slot = 0;
  int64_t token = 0;
  int64_t position = 0;
};

class Decoder {
 public:
  Decoder(const DecoderConfig& config, DecoderOptions options);
  // config.json and model.safetensors (or its shards: Note [Sharded
  // checkpoints]) of `model_dir`.
  static std::unique_ptr<Decoder> load(const std::string& model_dir, DecoderOptions options);

  // Compiles and records every bucket, decode largest first, then prefill
  // largest first (Note [Decode buckets share one pool]); the cache is left as it was.
  void warm_up();
  // Runs `prompt` into `slot`'s cache (positions 0..n-1; the rest of the slot
  // is cleared) and returns the f32 logits [vocab] of its last token.
  std::vector<float> prefill(int64_t slot, std::span<const int64_t> prompt);
  // Note [Chunked prefill]: runs `tokens` at positions start..start+n-1 of
  // `slot`, whose positions before `start` hold the prompt's earlier chunks
  // (start 0: prefill), and returns the f32 logits [vocab] of its last token.
  std::vector<float> prefill_chunk(int64_t slot, std::span<const int64_t> tokens, int64_t start);
  // One decode step; rows name distinct slots. Returns each row's f32 logits [vocab].
  std::vector<std::vector<float>> decode(const std::vector<DecodeRow>& rows);
  // Stores a decode program's new keys and values (its outputs 1..) at each
  // row's position (-1: none) on the current stream (Note [KV cache in static
  // buffers]); `table` is kv_write_table's for these outputs.
  void write_new_rows(const runtime::Tensor& table, const runtime::Tensor& positions) const;
  // Note [Running requests move to low slots]: copies slot `from`'s keys and
  // values (every layer, every position) into slot `to` and waits for the copy.
  void move_slot(int64_t from, int64_t to);

  int64_t prompt_bucket(int64_t length) const;  // smallest bucket >= length
  int64_t batch_bucket(int64_t rows) const;     // smallest bucket >= rows
  const std::vector<int64_t>& prompt_buckets() const { return options_.prompt_buckets; }
  const std::vector<int64_t>& batch_buckets() const { return options_.batch_buckets; }
  const DecoderConfig& config() const { return state_->config(); }
  DecoderState& state() { return *state_; }
  const DecoderState& state() const { return *state_; }
  const std::string& backend_name() const { return options_.backend; }
  bool fused_attention() const { return options_.fused_attention; }
  bool fused_norms() const { return options_.fused_norms; }
  // The backend's stats (the tree's counters and pool for "cudagraphs").
  compiler::backends::BackendStats backend_stats() const { return backend_->stats(); }
  // Device memory the backend holds beyond the state (its pool).
  compiler::backends::BackendMemory backend_memory() const { return backend_->memory(); }

 private:
  const compiler::backends::CompiledModel& prefill_model(int64_t bucket, bool chunk);
  std::vector<float> run_prefill(int64_t slot, std::span<const int64_t> tokens, int64_t start);
  const compiler::backends::CompiledModel& decode_model(int64_t bucket);
  compiler::backends::CompiledModel compile_program(const compiler::ir::Program& program,
                                                    const std::string& small_m_gemm);

  DecoderOptions options_;
  runtime::Device device_;
  std::unique_ptr<DecoderState> state_;
  std::shared_ptr<compiler::backends::ExecutionBackend> backend_;
  std::map<int64_t, compiler::backends::CompiledModel> prefill_models_;
  std::map<int64_t, compiler::backends::CompiledModel> chunk_models_;  // Note [Chunked prefill]
  std::map<int64_t, compiler::backends::CompiledModel> decode_models_;
};

}  // namespace grove::serving::llm
