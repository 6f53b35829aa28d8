// DecodeLoop runs the decode steps of one batch bucket on the device: the
// decode program, the KV-cache write, sampling into the next step's input ids
// and the stop test, with the tokens streamed to the host through mapped
// pinned memory. Either one graph launch per step, or K steps in one launch
// of a conditional WHILE graph (runtime::WhileGraph).
//
//   DecodeLoop loop(decoder, {.bucket = 8});
//   loop.warm_up();                                    // compiles and records both graphs
//   loop.set_row(slot, {.token = first, .position = prompt.size(), ...});
//   DecodeRun run = loop.run(32, DecodeMode::kWhileLoop, on_step);  // up to 32 steps
//
// Note [Decode loop on the device]
// Both modes replay the same work per step, recorded on DecodeLoop's own
// stream into its own pool from an eager compile of the decoder's decode
// program (sharing the DecoderState, so prefills from the Decoder fill the
// cache it reads): the program, kv_write of its new keys and values at each
// row's position, sample (Note [Sampling draws]; the token becomes the row's
// next input id and its position advances, or the row stops at EOS or its
// token budget and its position becomes -1) and loop_control (++step; the
// loop goes on while a row runs and step < budget; the step is published).
// The WHILE body adds one kernel that sets the condition from loop_control's
// flag. So K steps of the WHILE graph and K per-step launches run the same
// kernels on the same buffers and give identical tokens. Rows are slots
// (Note [KV cache in static buffers]); a row whose position is -1 is padding.
// The host never waits for a step except through the published counter in
// mapped memory: a token is readable once published[kPublishedSteps] passed
// its step (the device fences system-wide before publishing). Between runs
// the host may change rows (set_row, clear_row): a run waits for its graph to
// finish before returning. Tests: DecodeLoopTest.*
// (tests/serving/llm/decode_loop_test.cc).
//
// Note [Steps per WHILE iteration]
// Each iteration of a conditional WHILE body costs the device a fixed time
// beyond its kernels (the body's launch), about what a host-stepped graph
// launch costs. With steps_per_iteration = K the body holds K copies of the
// step (each with its own outputs and kv-write table) and one condition
// kernel, so that cost is paid once per K steps. A launch may stop within an
// iteration (its budget, or every row stopped): loop_control then sets the
// budget to the steps run, and sample and loop_control of every later copy
// in that iteration see step >= budget and do nothing, so no token is drawn,
// no row advances and no step is published. Those copies still run the
// program and the kv write for the rows that go on: each row's key and value
// at its next position, which that position's real step writes again with the
// same values (same token, position and cache); a new request in the slot
// prefills over them. So tokens are those of K = 1. Measured, it buys
// nothing (H200, session 19 round 1, batch 1, K = 1, 2, 4: small 82.0, 83.2,
// 81.9 us a step; 1B 871.2, 866.1, 871.1): an iteration costs the device
// about the 1.5 us of its condition kernel, so K stays 1 by default. Tests:
// DecodeLoopTest.StepsPerIterationGiveTheSameTokens (decode_loop_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "runtime/pinned_host_buffer.h"
#include "runtime/tensor.h"
#include "runtime/while_graph.h"
#include "serving/llm/decoder.h"
#include "serving/llm/sampler.h"

namespace grove::serving::llm {

struct DecodeLoopOptions {
  int64_t bucket = 1;      // a batch bucket of the decoder: rows 0..bucket-1 are its slots
  int64_t max_steps = 64;  // steps one run may take (the streamed-token buffer's rows)
  // Note [Steps per WHILE iteration]: copies of the step in the WHILE body.
  int64_t steps_per_iteration = 1;
};

// What a row continues from: its last token, fed at `position`, after
// `generated` tokens of at most `max_new_tokens`.
struct DecodeRowStart {
  int64_t token = 0;
  int64_t position = 0;
  int64_t generated = 1;
  int64_t max_new_tokens = 16;
  // Note [Every EOS token stops a row]: viewed for the set_row call, which
  // copies them into the row's state.
  std::span<const int64_t> eos_token_ids;
  SamplingParams sampling;
};

enum class DecodeMode : uint8_t { kPerStepGraphs, kWhileLoop };
enum class RowFinish : uint8_t { kRunning, kEos, kLength };
const char* decode_mode_name(DecodeMode mode);  // "per_step", "while"

struct DecodeRun {
  int64_t steps = 0;
  // The mode that ran: kPerStepGraphs for a kWhileLoop run where the WHILE
  // graph was refused (Note [Refused WHILE bodies]).
  DecodeMode mode = DecodeMode::kPerStepGraphs;
  // tokens[step][row]; -1 where the row did not run in that step.
  std::vector<std::vector<int64_t>> tokens;
};

class DecodeLoop {
 public:
  DecodeLoop(Decoder& decoder, DecodeLoopOptions options);
  ~DecodeLoop();

  // Compiles the eager decode program and records the per-step graph and the
  // WHILE graph (no step runs; the cache is untouched).
  void warm_up();
  // Makes `row` run from `start`; throws for a bad row, position or params.
  void set_row(int64_t row, const DecodeRowStart& start);
  void clear_row(int64_t row);
  // Runs up to `steps` steps (at most max_steps), fewer when every row stops.
  // `on_step(step, tokens)` is called as each step's tokens are published.
  DecodeRun run(int64_t steps, DecodeMode mode,
                const std::function<void(int64_t, const std::vector<int64_t>&)>& on_step = {});
  // After a run: whether the row still runs, stopped at EOS, or at its length.
  bool running(int64_t row) const;
  RowFinish finish(int64_t row) const;
  int64_t bucket() const { return options_.bucket; }
  size_t body_nodes() const;
  // After warm_up: the kernel nodes of the per-step graph by kernel name, in
  // the graph's node order (library kernels by the name CUDA gives them).
  std::vector<std::string> step_kernels() const;
  // After warm_up: whether the WHILE graph was recorded; else why not (the
  // device refused its body: Note [Refused WHILE bodies]).
  bool while_available() const;
  const std::string& while_refusal() const { return while_refusal_; }

 private:
  struct Recorded;
  void record();
  void check_row(int64_t row) const;
  void upload_rows();
  const int64_t* streamed() const;

  Decoder& decoder_;
  DecodeLoopOptions options_;
  runtime::Device device_;
  runtime::StreamHandle stream_;
  runtime::PoolId pool_;
  std::shared_ptr<compiler::backends::ExecutionBackend> backend_;
  std::optional<compiler::backends::CompiledModel> model_;
  runtime::Tensor ids_;
  runtime::Tensor positions_;
  runtime::Tensor row_state_;
  runtime::Tensor loop_state_;
  runtime::Tensor keep_going_;
  runtime::Tensor sample_partials_;  // Note [Greedy token over several blocks] (decode_kernels.h)
  runtime::PinnedHostBuffer published_;  // kPublishedWords, then tokens [max_steps, bucket]
  std::unique_ptr<Recorded> recorded_;
  // Host copies of ids_, positions_ and row_state_, current between runs.
  std::vector<int64_t> host_ids_;
  std::vector<int64_t> host_positions_;
  std::vector<int64_t> host_row_state_;
  bool rows_changed_ = true;
  std::string while_refusal_;
};

}  // namespace grove::serving::llm
