// The small-M GEMV of cuda's BLAS: decode-shaped GEMMs (a few rows of
// activations times a linear layer's weight) as grove's own bandwidth-bound
// kernel (small_m_gemv_kernel.cu) instead of a cuBLAS call. Internal to
// runtime/cuda: CublasSupport::gemm_row_major (blas.cc) calls it for every
// GEMM small_m_gemv_qualifies accepts; the free gemm_row_major() stays cuBLAS.
//
// Note [Small-M GEMV]
// At M <= 8 a GEMM reads its weight once and does little else, so its time
// is the weight's bytes over the bandwidth it reaches. The kernel gives each
// output column one warp, which streams the weight's row in 16-byte vectors
// (up to sixteen per lane in flight, the tail as one batch of predicated
// loads) and multiplies them with the same vectors of A's rows, summing in
// f32 (each lane in increasing k, then a shuffle tree): one kernel per GEMM
// (cuBLAS ran split-K pairs for some decode shapes). On an H100 it reached
// 2.7-2.9 TB/s for the LLaMA-1B gate/up and LM-head weights (64-131 MB) and
// 1.2-1.9 TB/s for the 8-34 MB ones, where launch and drain weigh more.
// It takes row-major C[m, n] = A[m, k] W[n, k]^T (transpose_b) with M of 1,
// 2, 4 or 8, bf16 or f16, alpha 1, beta 0 or 1 (C += the product, rounded
// once: a residual add), no epilogue, no batch, K, lda and ldb multiples of
// 8 and A and W 16-byte aligned (the vector loads); other GEMMs go to
// cuBLAS. Results differ from cuBLAS's within f32 rounding of the sums.
// Tests: CudaPlatformTest.SmallMGemvMatchesHostReference,
// CudaPlatformTest.SmallMGemvIsOneKernelInACapturedGraph
// (tests/runtime/cuda_platform_test.cc).
//
// Note [Streamed GEMV]
// A batch-1 step's GEMVs are 8-131 MB each, launched back to back: at one
// warp per column and 113 registers a thread (4 blocks an SM) the 1B down
// projection (2048 x 8192) took 20 us for 33.5 MB and every kernel paid about
// 3.5 us of ramp and drain (runtime/cuda/probes/gemv_pdl_probe.cu, H100).
// For one row of A (M = 1) the streamed kernels run two blocks per SM of 128
// threads and at most 48 KiB of shared memory (static), the warps taking
// columns w, w + warps, ...: each thread streams its own weight vectors
// through 24 shared-memory slots (20 in the RMSNorm GEMVs, whose gated form
// takes a gate and an up vector a step, and whose block first writes the
// normalized row, K <= 3072, into shared memory) that cp.async fills that
// far ahead of the fold (runtime/async_copy_device.h), and requests the
// first of them before its PDL wait, so the blocks, which leave room on their
// SM, load while the kernel before still runs. A thread reads only slots it
// filled itself: no barrier. Each lane folds the same vectors in the same
// order as the warp-per-column kernels (and the RMSNorm GEMV sums rstd with
// the same threads in the same order): identical bits, so the choice changes
// no result. Weights are read under an evict-first L2 policy: read once a
// step, they would otherwise push out what later kernels read again
// (activations, the KV cache, positions); same bits. Here for cuda's BLAS
// (the o and down projections); the RMSNorm GEMVs (qkv, gate/up) in
// runtime/rms_norm_gemv_kernel.cu.
// H100, session 18 round 1 (runtime/cuda/probes/gemv_pdl_probe.cu, 16 layers'
// GEMVs and the LM head in one graph): 1044.9 us a step warp per column (PDL,
// L2 prefetch) against 918.6-965.2 streamed (64-68% of 3.35 TB/s), the same
// logits bit for bit; down 20.8 -> 16.0-18.2 us, qkv 7.45 -> 5.6-6.9. In the
// decode step the first form (every RMSNorm GEMV normalizing again per weight
// vector) was slower, 1251 -> 1552 us, and the evict-first policy took 54 us
// off that. With the row normalized once in shared memory (round 2, one call,
// decode benchmark, batch 1, WHILE loop): the 1B step 1247.2 -> 1075.0 us
// (49.8% -> 57.8% of 3.35 TB/s, 802 -> 930 tokens/s), the small config's
// 102.2 (round 1) -> 94.7 us, the same tokens.
// GROVE_STREAMED_GEMV=0 keeps the warp-per-column kernels (=blas or =norm
// streams only the BLAS or only the RMSNorm GEMVs) and
// GROVE_WEIGHTS_EVICT_FIRST=0 the default L2 policy (both read at each
// launch: runtime::streamed_gemv_enabled, weights_evict_first).
// Tests: CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise,
// CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise
// (tests/runtime/cuda_platform_test.cc).
//
// Note [Streamed GEMV slots]
// In the probe's whole step (session 18 round 1) 32 slots of 128 threads
// (64 KiB of dynamic shared memory a block: KernelSource::max_dynamic_shared_bytes)
// beat 24 (918.6 against 950.7 us), down 17.9 -> 16.0 us and o 5.1 -> 5.0, but
// the LM head lost (45.4 -> 50.7). The _s32 entry points are the same kernel
// with 32 slots: the same loads folded in the same order, so the same bits.
// The RMSNorm GEMVs' _s28 entry points likewise take 28 slots for 20.
// The 24- and 20-slot kernels keep static shared memory, the deep ones take
// dynamic. GROVE_STREAMED_GEMV_SLOTS=deep runs the deep ones for every streamed GEMV,
// =auto for all but the LM head (more than 4096 columns); unset, 24 and 20
// (runtime::streamed_gemv_deep_slots, read at each launch).
// The deep kernels read their weights under the default L2 policy whatever
// GROVE_WEIGHTS_EVICT_FIRST says: under evict-first, GROVE_STREAMED_GEMV_SLOTS=auto
// stopped the 1B decode with cudaErrorIllegalInstruction (H100, session 21 round
// 1, after the variants of the defaults' kernels had run), the fault of the
// removed _x8 kernels (Note [Streamed GEMV holds A in shared memory]), and
// the bitwise tests had given the deep kernels the default policy only. In
// round 2 probes/sass_descriptor_check.py (ptxas 13.0, sm_90) found the same
// unwritten descriptor registers in grove_rms_norm_swiglu_streamed_bf16_s28's
// two evict-first cp.asyncs (desc[UR1], +0x480 and +0x730) and in no kernel of
// this file; under the default policy those instructions are predicated off.
// Tests: CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise and
// CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise, each with
// deep slots under both settings of GROVE_WEIGHTS_EVICT_FIRST, on cuda (passed
// on an H100, session 21 round 2; not yet timed in the benchmark: round 2's run
// was cut by its limit before its first row).
//
// Note [Streamed GEMV holds A in shared memory]
// The streamed GEMV's fold loads each of A's vectors right before it folds it,
// after waiting for its weight slot (an asm with a memory clobber), so each
// step of a lane's first column costs an L2 round trip: K / 256 of them (8 for
// the output projection, 32 for the down projection's K = 8192), while its
// weights already sit in shared memory (requested before the wait). On an H100
// (session 20 round 1, torch.profiler, 1B batch 1) down added 18.8 us a layer
// (1786 GB/s) and the output projection 7.0 (1202 GB/s) against the 2661 GB/s
// of gate/up, whose RMSNorm kernels hold A in shared memory. The _as entry
// points (GROVE_GEMV_A_SHARED=1, or =auto for at most 4096 columns, which leaves
// the LM head its 24 slots; K <= 8192; others keep the kernels above) copy
// A into shared memory once per block after the wait (its vectors spread over
// the block's threads, all loads in flight at once, one barrier) and fold from
// there: one round trip a block. A's 16 KiB take 8 of the 24 slots' place, so
// the block keeps 48 KiB of static shared memory (16 slots: 256 threads x 16 x
// 16 bytes = 64 KiB of weights in flight an SM, against the ~25 KiB an SM's
// share of 3.35 TB/s needs over a microsecond of latency;
// GROVE_STREAMED_GEMV_BLOCKS=3 runs three blocks an SM instead of two, for
// every streamed GEMV, the RMSNorm ones too). Same vectors folded in the same
// order, whichever warp takes a column: same bits. Measured, it buys nothing:
// H100, session 21 round 1 (decode --variants, 1B batch 1, WHILE loop):
// 1032.7 us a step, the defaults 1037.6 and 1036.3 in the next process
// on that GPU (the first process's own figure was lost to a later variant's
// fault), the same tokens; with three blocks an SM 1090.7, three blocks alone
// 1128.7 (benchmarks/session21_logs/wt-decode).
// So A's round trips were not what held these kernels back (likely, after an
// SM's first warp A's loads hit L1; not profiled: round 1's profile was cut),
// and it stays off; =auto keeps it from the LM head.
// Session 20's first answer, loading 8 of a lane's vectors of A ahead (the _x8
// entry points, GROVE_GEMV_X_AHEAD=1), passed the bitwise test but stopped the
// 1B decode with cudaErrorIllegalInstruction. compute-sanitizer placed it in
// grove_small_m_gemv_streamed_bf16_x8 at +0x490 (session 21, r0); the SASS
// there (ptxas 13.0, sm_90) is the evict-first cp.async, LDGSTS ... desc[UR1],
// whose descriptor registers UR1 and UR2 no instruction before it writes (the
// 24-slot kernel's reads desc[UR4], written from the folded createpolicy):
// probes/sass_descriptor_check.py finds such uses. The test had run those
// kernels under the default policy only; under evict-first they faulted in it
// too (round 1), and under the default policy the step took 1095.4 us against
// 1048.3 (slower). They are removed.
// Tests: CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise (the 1B
// step's three shapes and K = 8200, past the shared copy, under both policies,
// on cuda: passed on an H100, session 21 rounds 1 and 2).
//
// Note [Streamed GEMV allows the next kernel first]
// A streamed GEMV's part before its wait only requests weights, and the
// kernels after it in a decode step (the next GEMV, the attention) read before
// their own wait only weights, the KV cache and positions, none written within
// the layer's kernels. So a streamed GEMV calls griddepcontrol.launch_dependents
// first thing, and the next kernel's blocks start, and request their weights,
// while this one still waits on the kernel before it: the output projection's
// successor (gate/up, 67 MB in the 1B config) streams during the attention
// kernel, where before only the 8 MB of the output projection did. This
// relaxes (2) of Note [Programmatic dependent launch] for the kernels after
// such a GEMV: their part before the wait may overlap several kernels. Each
// wait still returns only once the kernel right before completed, which is
// after that kernel's own wait: data dependencies are kept, and the bits are
// the same (flag kAllowNextFirst, runtime/cuda/streamed_gemv_flags.h).
// GROVE_GEMV_ALLOW_NEXT_FIRST=0 allows it after the wait as before (=blas or
// =norm: only the o, down and LM-head GEMVs, or only the RMSNorm GEMVs, first).
// H200, session 22 round 1 (decode --variants, one process, batch 1, WHILE
// loop): the 1B step 873.1 -> 830.7 us (the defaults again at the end: 879.8),
// small 88.3 -> 85.7, the same tokens; round 2, with the notes below on: =0
// gave 853.8 against 800.6 (1B) and 91.9 against 85.5 (small).
// Tests: CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise and
// CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise (settings
// with and without it), DecodeLoopTest on cuda.
//
// Note [Streamed GEMV reads C first]
// With beta 1 (the linear_residual op: the o and down projections) lane 0 of
// a warp read its column of C after the warp's sum: one more L2 round trip at
// the end of each column, after the fold. Now it loads it as the column's
// fold starts (after the wait: C is the residual stream an earlier kernel
// wrote) and adds the same value: same bits (flag kResidualFirst;
// GROVE_GEMV_RESIDUAL_FIRST=0 reads it after the sum). H200, session 22 round
// 1 (as above): the 1B step 873.1 -> 859.5 us, small 88.3 -> 88.3; round 2:
// =0 gave 828.7 against 800.6 (1B), 85.6 against 85.5 (small).
// Tests: as above (settings "C first", "C after the sum").
//
// Note [Streamed GEMV prefetches columns into L2]
// Under GROVE_GEMV_PREFETCH_COLUMNS=N (both kinds, read at each launch) each
// warp of a streamed GEMV also warms L2 with the first N of its columns' W rows
// (prefetch.global.L2 over 128-byte lines) before its wait, beyond what its
// shared-memory ring holds: with the next kernel allowed first, the gate/up
// GEMV's blocks start during the attention kernel, whose HBM is otherwise
// idle, and their ring refills then hit L2. Changes no value: same bits.
// Measured, it costs, so it stays off: H200, session 22 round 2 (decode
// --variants, batch 1, WHILE loop): 1B 874.4 us a step with N = 2 and 878.0
// with 4, against 800.6 (the extra traffic competes with the kernel that
// streams before the wait returns); small 86.4 and 86.7 against 85.5.
// Tests: as above (settings "columns prefetched into L2").
//
// Copy-engine copies of W (cp.async.bulk into a ring per warp, each 2 KiB chunk
// completing an mbarrier) were built in session 22 as _bulk entry points of
// both kinds (GROVE_GEMV_BULK) and gave the same bits, but lost: H200, session
// 22 round 2 (decode --variants, batch 1, WHILE loop), 1B 873.8 us a step
// against 800.6 with the per-thread copies above, small 86.6 against 85.5.
// They were removed in session 25 (the other entry points' PTX unchanged but
// for the shared memory nvcc now declares inside each entry). Whether one
// request of 2 KiB at a time per stage kept too few bytes in flight was never
// profiled; that is where to start if they are tried again.
//
// Note [RMSNorm GEMV keeps its row in registers]
// A streamed RMSNorm GEMV's blocks read x after their wait to sum its squares
// and read x and the gain again to normalize: two L2 round trips in a row
// on the path from the kernel before to the first fold. Now each thread keeps
// its vectors of x (K <= 3072: at most 3) in registers from the first read
// and has loaded its vectors of the gain, a weight, before the wait: one
// round trip. Same values in the same order: same bits (flag kRowInRegisters;
// GROVE_GEMV_ROW_IN_REGISTERS=0 reads both again). H200, session 22 round 2
// (as above): =0 gave 813.0 us against 800.6 (1B), 85.8 against 85.5 (small).
// Tests: CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise
// (settings "row in registers", "row read twice").
#pragma once

#include <mutex>

#include "runtime/blas.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

// Whether the kernel computes `args` (a row-major GEMM, as gemm_row_major takes it).
bool small_m_gemv_qualifies(const GemmArgs& args);

// The kernels of one cuda platform, loaded on first use.
class SmallMGemv {
 public:
  explicit SmallMGemv(Platform& platform) : platform_(platform) {}
  // Enqueues the qualifying GEMM `args` on `stream`.
  void launch(StreamHandle stream, const GemmArgs& args);

 private:
  // One row of A: Note [Streamed GEMV]. type: 0 bf16, 1 f16.
  void launch_streamed(StreamHandle stream, const GemmArgs& args, int type);

  Platform& platform_;
  std::mutex mutex_;                 // guards the loads (any thread may run GEMMs)
  KernelHandle kernels_[2][4] = {};  // [bf16, f16][M = 1, 2, 4, 8]
  bool loaded_[2][4] = {};
  // [bf16, f16][24 slots, 32 slots, A in shared memory]: Note [Streamed GEMV], Note [Streamed
  // GEMV slots], Note [Streamed GEMV holds A in shared memory]
  KernelHandle streamed_[2][3] = {};
  bool streamed_loaded_[2][3] = {};
};

}  // namespace grove::runtime::cuda_detail
