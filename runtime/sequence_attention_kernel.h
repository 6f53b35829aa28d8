// The sequence attention kernel: softmax(query key^T * scale + mask) value over
// short sequences as one kernel grove launches itself (PTX on cuda, a host
// function on sim), reading every operand through its strides. The compiler's
// `attention` op runs on it where it takes the shapes (Note [Attention on the
// sequence attention kernel], compiler/lowering/scheduler.cc).
//
// Note [Sequence attention kernel]
// At the zoo's shapes (batch 16, 12 to 48 positions, heads of 32 or 64
// features) attention written out was a copy of each of query, key and value
// out of the fused projection (a batched GEMM needs one batch stride, and
// [B, H] of a [B, T, 3, H, D] view has two), two batched GEMMs, the softmax
// and the copy merging the heads back; grove's generated fused kernel reduced
// every output feature across a warp. This kernel does the whole attention in
// one launch, with no copies: block (query tile, query head, batch) loads its
// key head's keys [Tk, D], values [Tk, Dv] and its query rows through their
// strides into shared memory (keys padded to D + 1 floats a row, so that 32
// lanes reading one feature of 32 keys hit 32 banks), issuing every load of
// 32 positions by 64 features before it stores any (a first version that
// stored each load as it came waited a memory latency per load: 15 us for
// GPT-2's attention at batch 16 against 8.6 for PyTorch's, round 1 of
// session 17 on an H100; staged, 9.1 against 8.7, and ViT's 6.9 against 8.4,
// round 2; 48 keys took two passes: 14.5 against 9.3 for the
// nn.TransformerDecoder's cross attention, so up to 64 now take one: Note
// [Sequence attention staging passes] in the .cc), then each of its four warps takes a
// query row at a time: lanes over keys compute the scaled scores (four
// partial sums over the features), the mask (bool: -inf where false;
// additive: added; causal: -inf for key j > query i) and the softmax's max
// and sum by warp shuffles, the weights go to shared memory, and lanes over
// value features sum weight * value and write the row through the result's
// strides (heads-last results need no copy either). A row whose scores are
// all -inf writes zeros (PyTorch's safe softmax). Arithmetic is f32 for f32,
// bf16 and f16 operands, rounded once at the store. It takes rank >= 3
// operands whose leading dims collapse into one batch stride each, D and Dv
// that with Tk fit 48 KiB of shared memory, and grids within CUDA's limits;
// sequence_attention_refusal says why not otherwise (the lowering then uses
// its generated kernel). Tests: SequenceAttention.* (tests/runtime/
// sequence_attention_kernel_test.cc: against a float64 reference on sim and,
// when present, cuda) and AttentionLowering.* (tests/compiler/lowering/
// attention_kernel_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::runtime {

inline constexpr uint32_t kSequenceAttentionThreads = 128;
inline constexpr int64_t kSequenceAttentionMaxSharedBytes = 48 * 1024;

// One operand's shape and element strides.
struct AttentionOperandLayout {
  Shape shape;
  Shape strides;
};

// The operands of one attention: query [..., Hq, Tq, D], key [..., Hk, Tk, D],
// value [..., Hk, Tk, Dv], result [..., Hq, Tq, Dv], and an optional mask
// broadcastable to [..., Hq, Tq, Tk] (bool, or `dtype` to add to the scores).
struct SequenceAttentionLayouts {
  DType dtype = DType::kF32;
  AttentionOperandLayout query, key, value, result;
  std::optional<AttentionOperandLayout> mask;
  DType mask_dtype = DType::kBool;
};

// Empty when the kernel takes these operands; else why not (Note [Sequence
// attention kernel]). Shapes that do not fit together are refused too (the
// attention op's inference checks them first).
std::string sequence_attention_refusal(const SequenceAttentionLayouts& layouts);

// Enqueues the attention on `stream` of the tensors' device, writing `result`
// (of query's dtype, any strides). `mask` may be undefined. Throws ShapeError
// naming the refusal when the kernel does not take the operands.
void launch_sequence_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                               const Tensor& mask, const Tensor& result, float scale, bool causal,
                               StreamHandle stream);

}  // namespace grove::runtime
