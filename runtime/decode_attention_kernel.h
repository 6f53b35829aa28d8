// The decode attention kernel: one decode step's attention of a LLaMA layer
// (rotary embedding, grouped-query attention over the KV cache and the row's
// own new key and value) as one kernel grove launches itself (PTX on cuda, a
// host function on sim), behind the compiler's decode_attention op
// (compiler/ops/attention_ops.cc).
//
// Note [Decode attention kernel]
// A decode step's attention ran as nine kernels per layer: the rotation of
// the queries and of the new key, the scores against the cache and against
// the own key (two batched GEMMs), two concats, the masked softmax, the
// weighted values (a GEMM) and the own value's share. At batch 1 each of them
// is a few microseconds of launch and ramp for kilobytes of data. This
// kernel does the same in one: block (kv_head, row) takes the row's fused
// projection [q heads | k heads | v heads] (the qkv GEMM's output), rotates
// its query heads of that group and its new key (x cos + rotate_half(x) sin),
// scores them against the cached keys at positions t < position of the
// row's slot and against its own key, takes the softmax over those and sums
// the cached values and its own value with those weights. It works in place:
// the attended heads overwrite the query heads, the rotated key the key,
// the value stays; the caller writes key and value into the cache afterwards
// (Note [KV cache in static buffers], serving/llm/decoder_program.h). The
// values the unfused ops store at the model's precision are rounded the same
// way here (the rotated heads, the scores, the probabilities); what their
// fused kernels keep in registers stays f32 (the scaled scores, the softmax);
// sums are in f32 (one rounding of the attended heads, as prefill's GEMM).
// So on sim a bf16 decode step's logits equal a full prefill's recompute
// (the unfused ops were 0.1 off). A row with position -1 (padding) gets
// zeros. Tests: DecoderRecompute.* (tests/serving/llm/decoder_test.cc: fused
// and unfused, against prefill), DecoderGraphs.FusedAttentionMatchesTheUnfusedOps,
// and on cuda the decode-loop and transformers tests.
// Speed (H100, decode benchmark, batch 1, 64 steps after a 16-token
// prompt): the small config's step went from 161 to 132 us with it, but the
// 1B step did not move (1411 vs 1407 us). The kernel runs as a few blocks
// (kv_heads x rows), each executing its code once, so the size of its code
// is latency: instruction fetches from L2 that no other block has warmed.
// One entry point for both dtypes and every group count, unrolled for 8
// groups and predicated, was 78 KiB of SASS and ~13 us per call (small
// config, from the step times); a variant that prefetched more loads but
// grew to 185 KiB took 24.5 us (ncu, round 1 of session 16). So each dtype
// and group count has its own entry point (grove_decode_attention_bf16_g4,
// ...; 15-26 KiB, 64 registers instead of 128), offsets are 32-bit and
// runtime loops are not unrolled: with it (and deeper loads in sampling) the
// 1B batch-64 step went from 1804.5 to 1562.6 us (H100, round 2 of session
// 16, same tokens). (ptxas 13.0 now gives bf16_g4 151 registers. Folding
// the early keys from the registers they were loaded into, one key array
// instead of two, took it to 95, so that a block fits an SM beside four
// streamed GEMV blocks; measured, it cost: H200, session 22 round 2, decode
// --variants, batch 1, WHILE loop: 1B 800.6 us a step against 788.9 with two
// arrays, small 85.5 against 84.1, the same tokens. So two arrays stay.)
//
// Note [Decode attention loads the cache early]
// At batch 1 the kernel is 8 blocks (kv_heads x rows) whose every phase waits
// on memory; the cached keys and values it reads were written by earlier
// steps (kv_write) or the prefill, and the positions by the step before's
// sampling, never by the kernel right before it (the qkv projection). By
// Note [Programmatic dependent launch] (2), when a programmatic kernel runs
// its part before griddepcontrol.wait every kernel but the one right before it
// has completed (after a streamed GEMV, which allows the next kernel first,
// the kernels of the layer may still run, and none of them writes the cache
// or the positions), so the kernel reads its row's position, the cached keys of
// each thread's first position and the cached values of its first round
// there, while the projection drains; the qkv row is read only after the
// wait. The same loads in the same order feed the same arithmetic: results
// are bit for bit those of loading after the wait (the entry points
// grove_decode_attention_<dtype>_g<G>_late, launched under
// GROVE_ATTENTION_EARLY_LOADS=0 for comparisons). H200, session 19 round 1
// (decode benchmark, 1B batch 1, one call): per-step
// graphs 912.0 -> 868.7 us, the WHILE loop 911.9 -> 871.2, the same tokens.
// The kernel still added 8 us a layer after the qkv projection ended
// (torch.profiler, probes/profile_decode.py): 129 of the step's 860 us.
// Tests: on cuda,
// DecoderRecompute.* and DecodeLoopTest.* (the decode program's logits and
// tokens), and the decode benchmark's tokens with either setting.
//
// Note [Decode attention runs dry before its wait]
// The kernel's blocks start while the qkv projection drains (they are
// programmatic) and, with only early loads before the wait, fetch most of
// their 25-36 KiB of code from L2 after it: session 16 saw the kernel's time
// grow with its code (78 KiB ~13 us, 185 KiB 24.5 us), and it added 8 us a
// layer in session 19 (H200) and 8.1 us on an H100 in session 20's round 1.
// The _warm entry points (bf16, one row, GROVE_ATTENTION_WARM=1) run the
// whole kernel once before the wait as a dry pass: every phase and loop with
// the same trip counts, the qkv row read as zeros (the projection is writing
// it, and a load before the wait could leave a stale line in L1), nothing
// stored to global memory; then, after the wait, the same code again for
// real. The dry pass fetches the code into the instruction cache and the
// cached keys and values into L1 while the projection still runs; the real
// pass's loads and arithmetic are the late kernel's, so the bits are too
// (passed on an H100, session 20 round 1). The kernel starts about 4.9 us
// before the projection ends there, so a dry pass of about the kernel's
// length mostly hides. Measured, it costs: H100, session 21 round 1 (decode
// --variants, one process, 1B batch 1, WHILE loop) 1187.9 us a step against the
// defaults' 1037.6, the same tokens (why was not profiled). It stays off, and only
// for one row, where the projection before it is the streamed RMSNorm GEMV, a
// programmatic kernel: after a kernel that
// is not (cuBLAS at larger batches) the wait returns at once and a dry pass
// would be pure cost. In the compute_80 PTX (older GPUs,
// GROVE_PROGRAMMATIC_LAUNCH=0) there is no wait to run dry before, and the
// _warm entry points are the late kernel.
// Test: DecodeAttentionKernel.EntryPointsGiveTheSameBitsAfterAProgrammaticGemv
// (tests/runtime/decode_attention_kernel_test.cc, in the cuda_platform_test binary).
//
// Note [Decode attention for many rows]
// The early kernel (the default) takes 151 registers (ptxas 13.0, bf16_g4),
// so one block of 256 threads fits an SM: at batch 1 (8 blocks) that costs
// nothing, but a 1B decode step at batch 64 runs 512 blocks in four waves:
// 36 us a layer, 586 of the step's 1651 us (H200, session 23 round 1,
// torch.profiler, max_seq_len 128), and the cuBLAS GEMM before it is not a
// programmatic kernel, so the early loads overlap nothing there. Where the
// grid (kv_heads x rows) is more blocks than the device has SMs, the
// launcher takes grove_decode_attention_<dtype>_g<G>_many: the late kernel
// (the same loads and arithmetic after the wait: the same bits) compiled
// under __launch_bounds__(256, 4), 64 registers and no spills for bf16_g4, so four blocks
// share an SM and 512 blocks run in one wave. GROVE_ATTENTION_MANY=0 keeps
// the early kernel at every batch, =1 takes _many at every batch (read at
// each launch, for A/Bs in one process). H200, session 23 round 3 (decode
// load, 1b, 256 requests at 400/s, buckets 16,32,64, 2 prefills a step, chunk
// 32, max_seq_len 256, one process, alternating): the 64-row step 2.09 and
// 2.10 ms with the early kernel, 1.76 and 1.77 with _many; 11399 and 11262
// tokens/s against 12447 and 12152. Test:
// DecodeAttentionKernel.EntryPointsGiveTheSameBitsAfterAProgrammaticGemv
// (setting "many").
#pragma once

#include <cstdint>

#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::runtime {

// Query heads per kv head the kernel takes at most.
inline constexpr int64_t kDecodeAttentionMaxGroups = 8;
inline constexpr uint32_t kDecodeAttentionThreads = 256;

// Whether the kernel runs this shape: f32 or bf16, heads a multiple of
// kv_heads with at most kDecodeAttentionMaxGroups per kv head, an even
// head_dim of at most kDecodeAttentionThreads, and shared memory for
// cache_len positions within 48 KiB. Empty when it does; else why not.
std::string decode_attention_refusal(DType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                     int64_t cache_len);

// Enqueues the kernel on `stream` of the tensors' device: qkv [rows, (heads +
// 2 kv_heads) * head_dim] (contiguous, rewritten in place), cos and sin
// [positions, head_dim] (the rotary tables, read at each row's position), key_cache and
// value_cache [rows, kv_heads, cache_len, head_dim], positions i64 [rows].
// Throws ShapeError / DTypeError for operands that do not fit together.
void launch_decode_attention(const Tensor& qkv, const Tensor& cos, const Tensor& sin,
                             const Tensor& key_cache, const Tensor& value_cache,
                             const Tensor& positions, int64_t heads, StreamHandle stream);

}  // namespace grove::runtime
