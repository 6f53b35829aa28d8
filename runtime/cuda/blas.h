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
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class GemmEpilogue : uint8_t { kNone, kBias, kBiasGelu };
const char* gemm_epilogue_name(GemmEpilogue epilogue);  // "none", "bias", "bias_gelu"

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
};

// Enqueues the GEMM on `stream` of `device` (a cuda device). Throws ShapeError
// or DTypeError for bad arguments, DeviceError when cuBLAS is missing or fails,
// CaptureViolation when the stream's capture forbids it.
void gemm(Device device, StreamHandle stream, const GemmArgs& args);
// The same GEMM with every matrix row-major (leading dimension = row stride).
void gemm_row_major(Device device, StreamHandle stream, const GemmArgs& args);

// Creates the (device, stream) handle and its workspace now, e.g. before a
// capture, so that the first captured GEMM does no set-up work.
void prepare_gemm(Device device, StreamHandle stream);

// Whether libcublas.so.13 could be opened; the reason when it could not.
bool cublas_available();
std::string cublas_unavailable_reason();

}  // namespace grove::runtime
