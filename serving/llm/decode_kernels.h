// The decode step's own kernels, beside the compiled decode program: the
// KV-cache write at one position per row (Note [KV cache in static buffers]),
// token sampling on the device (Note [Sampling draws]) and DecodeLoop's loop
// control (Note [Decode loop on the device], decode_loop.h). PTX on cuda
// (decode_kernels.cu), host functions on sim that compute the same thing.
// Launches go to the current stream of the tensors' device.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"
#include "serving/llm/decode_kernels_layout.h"

namespace grove::serving::llm {

// The pointer table of launch_kv_write: the caches (full-size tensors, slot 0
// first), then the new rows (contiguous [rows, kv_heads, head_dim]), as one
// i64 tensor on the device. Throws when a new-rows tensor is not contiguous.
runtime::Tensor kv_write_table(const std::vector<runtime::Tensor>& caches,
                               const std::vector<runtime::Tensor>& new_rows);

// For each row with positions[row] >= 0 and each cache: new_rows[row] goes
// to slot `row`, position positions[row] of that cache.
void launch_kv_write(const runtime::Tensor& table, int64_t tensors,
                     const runtime::Tensor& positions, int64_t kv_heads, int64_t max_seq_len,
                     int64_t head_dim, runtime::DType dtype);

// Note [Prefill cache writes]: a prefill (or a chunk of one) returns its
// new keys and values [rows, kv_heads, head_dim] like a decode step, and this
// kernel stores rows 0..count-1 at positions start..start+count-1 of `slot`
// in every cache of `table` (kv_write_table's layout) and zeros at the slot's
// positions after them: O(max_seq_len) per cache and slot, where the masked
// rewrite of the whole cache it replaced was O(slots * max_seq_len) (every
// prefill read and wrote every slot). A slot's positions past what its
// request wrote stay zero, as a fresh cache's are. Tests:
// DecoderGraphs.DecodeWritesTheCacheInPlaceWithoutCopies,
// DecoderChunks.ChunkedPrefillWritesTheCacheOfTheWholePrompt (decoder_test.cc).
void launch_kv_write_span(const runtime::Tensor& table, int64_t tensors, int64_t slot,
                          int64_t start, int64_t count, int64_t kv_heads, int64_t max_seq_len,
                          int64_t head_dim, runtime::DType dtype);

// For each row with positions[row] >= 0: samples its token from logits
// [rows, vocab] with its row state (decode_layout), makes it the row's next
// input id, advances its position (or sets it to -1 when the request ends)
// and writes it to streamed[step * rows + row] (host-mapped memory allowed);
// rows already done write -1 there. `loop_state` holds the step.
//
// Note [Greedy token on the device]: the first largest logit of a row is
// greedy's token (and the max the weights are taken against). The kernel's
// threads read the row coalesced (thread t: elements t, t + kThreads, ...,
// or 16-byte vectors t, t + kThreads, ... where the row allows them: an
// H100 spent 11 us of a 1B decode step in the element loop)
// and reduce (value, index) pairs, a larger value or an equal one at a lower
// index winning, through warp shuffles and then across warps: the token of a
// scan in index order, in a few microseconds where a per-thread scan of
// contiguous chunks took 46 us per launch on an H100. Test:
// DecodeLoopTest.DeviceSamplingMatchesTheHostReference (ties at the max).
//
// Note [Greedy token over several blocks]
// One block reading a 32000-logit row took about 6 us of a batch-1 step
// (H100, torch.profiler). With `partials` (an i64 tensor of
// sample_partials_size(rows) zeros on the logits' device, kept between
// launches; DecodeLoop passes one) a single row runs kDefaultSampleParts
// blocks, more rows one block each (only batch 1 was timed); GROVE_SAMPLE_PARTS=N
// (1..kMaxSampleParts, read at each launch; 1 is the one block as before) sets
// the blocks of every row. Each finds the first largest logit of a contiguous
// share of the row; the row's last block to finish (an atomic counter in
// `partials`, which it zeroes again) takes the first largest of their pairs
// in part order, which is the row's first largest logit whatever the split,
// and goes on alone as the one block did (the sampled rows' scans over the
// whole row included). H200, session 22 round 2 (decode --variants, batch 1,
// WHILE loop): 1B 800.6 -> 794.2 us a step with 16 parts, small 85.5 -> 85.3,
// the same tokens. Test: DecodeLoopTest.DeviceSamplingMatchesTheHostReference
// (1, 4 and 33 parts; passed on an H200 in that round).
inline constexpr int64_t kMaxSampleParts = 64;
inline constexpr int64_t kDefaultSampleParts = 16;
int64_t sample_partials_size(int64_t rows);
void launch_sample(const runtime::Tensor& logits, const runtime::Tensor& ids,
                   const runtime::Tensor& positions, const runtime::Tensor& row_state,
                   int64_t max_seq_len, int64_t* streamed, const runtime::Tensor& loop_state,
                   const runtime::Tensor* partials = nullptr);

// One thread: ++step; *keep_going = (a row runs and step < budget); then
// published[kPublishedStopped] = !keep_going and, last,
// published[kPublishedSteps] = step (host-mapped memory allowed).
void launch_loop_control(const runtime::Tensor& positions, const runtime::Tensor& loop_state,
                         const runtime::Tensor& keep_going, int64_t* published);

}  // namespace grove::serving::llm
