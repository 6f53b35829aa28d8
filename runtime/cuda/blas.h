// grove's matrix-multiply entry points on cuda devices, backed by cuBLAS.
// This header has no CUDA include, so the compiler layer calls it directly;
// cuBLAS itself is opened at first use (cublas_library.h), never linked.
//
// Every GEMM runs on the given stream with a cuBLAS handle that belongs to that
// (device, stream) pair and has a workspace allocated once, outside any capture
// pool: a GEMM captured into a graph never allocates, so it replays safely.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace grove::runtime {

// Work cuBLASLt applies to the product before storing it (Note [GEMM
// epilogues]): nothing, + bias, or gelu(+ bias) with gelu's tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); kBiasGeluAux
// is kBiasGelu that also stores the pre-activation (product + bias) into `aux`
// for the backward (Note [GEMM auxiliary output]). kBiasGradA / kBiasGradB
// also write a bias gradient (Note [GEMM bias gradients]). kDGelu multiplies
// the product by gelu'(aux), the gelu gradient (Note [GEMM auxiliary output]).
enum class GemmEpilogue : uint8_t {
  kNone,
  kBias,
  kBiasGelu,
  kBiasGeluAux,
  kBiasGradA,
  kBiasGradB,
  kDGelu
};
// "none", "bias", "bias_gelu", "bias_gelu_aux", "bias_grad_a", "bias_grad_b", "dgelu"
const char* gemm_epilogue_name(GemmEpilogue epilogue);

// One GEMM (or a strided batch of them) in cuBLAS's column-major convention:
// C = alpha * op(A) * op(B) + beta * C, op(A) is m x k, op(B) is k x n, C is
// m x n. A stored untransposed is m x k with leading dimension lda >= m;
// transposed, k x m with lda >= k (likewise B). A, B and C share `dtype`
// (f32, f16 or bf16); accumulation is in f32. For row-major tensors use
// gemm_row_major, which swaps the operands so that cuBLAS sees C^T.
struct GemmArgs {
  DType dtype = DType::kF32;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  // Batches: matrix i of A starts stride_a elements after matrix i-1 (etc.).
  int64_t batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Note [GEMM epilogues]: with an epilogue, C = epilogue(alpha op(A) op(B) +
  // beta C + bias) where `bias` (of `dtype`, contiguous) has one element per
  // row of the column-major C (m of gemm(); for gemm_row_major, one per column
  // of the row-major C, its n). Epilogues need batch_count = 1 and run through
  // cuBLASLt, whose GELU is the tanh approximation above.
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;
  // Note [GEMM auxiliary output]: with kBiasGeluAux, the matrix gelu was
  // applied to (alpha op(A) op(B) + beta C + bias) is also stored into `aux`,
  // laid out like C (same rows and columns, of `dtype`) with leading dimension
  // ld_aux. cuBLASLt needs ld_aux to be a multiple of 8 and at least C's rows
  // (column-major m); the lowering only asks for it when that holds. The
  // forward of a training step keeps this pre-activation for gelu's gradient
  // instead of running the gelu as a separate kernel after the GEMM. With
  // kDGelu, `aux` (same layout rules) is read: C = op(A) op(B) * gelu'(aux),
  // elementwise, with gelu' the derivative of the tanh approximation (needs
  // alpha 1, beta 0, batch_count 1): the backward's product of the next
  // layer's gradient and its weight, times gelu', in one GEMM (cuBLASLt DGELU).
  void* aux = nullptr;
  int64_t ld_aux = 0;
  // Note [GEMM bias gradients]: besides C, kBiasGradA writes
  // bias_grad[i] = sum_p op(A)[i, p] (one per row of op(A): m values) and
  // kBiasGradB writes bias_grad[j] = sum_p op(B)[p, j] (n values), reduced over
  // k: cuBLASLt's BGRADA / BGRADB. A weight-gradient GEMM dW = G^T X thereby
  // also yields the bias gradient (G summed over rows) without a reduction
  // kernel. The same math holds for gemm_row_major with row-major matrices
  // (it swaps A and B, so kBiasGradA becomes cuBLASLt's BGRADB). Needs
  // batch_count 1, alpha 1 and beta 0; bias_grad (of `dtype`) is contiguous.
  void* bias_grad = nullptr;
};

// Enqueues the GEMM on `stream` of `device` (a cuda device). Throws ShapeError
// or DTypeError for bad arguments, DeviceError when cuBLAS is missing or fails,
// CaptureViolation when the stream's capture forbids it.
void gemm(Device device, StreamHandle stream, const GemmArgs& args);
// The same GEMM with every matrix row-major (leading dimension = row stride).
void gemm_row_major(Device device, StreamHandle stream, const GemmArgs& args);

// Whether cuBLASLt on `device` (a cuda device) has an algorithm for a
// representative row-major GEMM (64 x 64 x 64, operands laid out as the
// lowering's linear / weight-gradient GEMMs are) of `dtype` with `epilogue`,
// so that the lowering only asks for epilogues the installed cuBLASLt runs.
// False (never a throw) when cuBLAS is missing; cached per (device, epilogue, dtype,
// sizes).
// `m`, `n`, `k` are the row-major GEMM's sizes (C is m x n, k reduced): the
// bias-gradient epilogues are not available for every shape (cuBLASLt 13 on
// an H200 refused BGRADB for k = 1 and k = 8 while it ran k = 32), so the
// lowering asks with the real sizes.
bool gemm_row_major_epilogue_available(Device device, GemmEpilogue epilogue, DType dtype,
                                       int64_t m = 64, int64_t n = 64, int64_t k = 64);

// Creates the (device, stream) handle and its workspace now, e.g. before a
// capture, so that the first captured GEMM does no set-up work.
void prepare_gemm(Device device, StreamHandle stream);

// Note [cuBLAS state of destroyed streams]: called when `stream` is being
// destroyed (after it finished its work): its handle and workspace go to a
// free list of the device, and the next stream that needs cuBLAS takes them
// over instead of allocating another workspace (32 MiB on Hopper). Without
// this, every stream ever used for a GEMM kept its workspace until exit: a
// process that creates tree managers (each with a capture stream) over and
// over ran out of device memory (the cuda fuzzer after about 4,000
// programs). Nothing is freed, so a graph captured on the stream never
// reads freed memory; graphs must still not outlive their capture stream
// and replay beside the stream that inherits it (the tree manager destroys
// its graphs before its capture stream).
void recycle_gemm_state(Device device, StreamHandle stream);
// How many cuBLAS handles (each with a workspace) exist for `device`, in use
// or recycled: bounded by the most streams that used GEMMs at once.
size_t gemm_state_count(Device device);

// Whether libcublas.so.13 could be opened; the reason when it could not.
bool cublas_available();
std::string cublas_unavailable_reason();

}  // namespace grove::runtime
