// cuda's BLAS: grove's GEMM entry points on cuda devices, backed by cuBLAS and
// cuBLASLt (GemmArgs and the epilogues are described in runtime/blas.h).
// CudaPlatform::blas() is make_cublas_support(); the free functions are for
// the cuda platform itself and cuda-only tests. cuBLAS is opened at first use
// (cublas_library.h), never linked; this header has no CUDA include.
//
// Every GEMM runs on the given stream with a cuBLAS handle that belongs to that
// (device, stream) pair and has a workspace allocated once, outside any capture
// pool (cublas_handles.h): a GEMM captured into a graph never allocates, so it
// replays safely. GEMMs with epilogues go through cuBLASLt plans
// (cublaslt_plans.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/blas.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/platform.h"

namespace grove::runtime {

// The BlasSupport of cuda device `device` (calls the functions below, except
// for decode-shaped GEMMs, which run grove's kernel through `platform`, the
// device's platform: Note [Small-M GEMV] in small_m_gemv.h).
std::unique_ptr<BlasSupport> make_cublas_support(Device device, Platform& platform);

// Enqueues the column-major GEMM on `stream` of `device` (a cuda device).
// Throws ShapeError or DTypeError for bad arguments, DeviceError when cuBLAS
// is missing or fails, CaptureViolation when the stream's capture forbids it.
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
// over instead of allocating another workspace (32 MiB on Hopper), so the
// number of workspaces is bounded by the most streams that used GEMMs at once,
// however many streams a process creates and destroys. Nothing is freed, so a
// graph captured on the stream never reads freed memory; graphs must still
// not outlive their capture stream and replay beside the stream that inherits
// it (the tree manager destroys its graphs before its capture stream).
// Guarded by CudaPlatformTest.DestroyedStreamsHandTheirCublasStateToTheNextStream.
void recycle_gemm_state(Device device, StreamHandle stream);
// How many cuBLAS handles (each with a workspace) exist for `device`, in use
// or recycled: bounded by the most streams that used GEMMs at once.
size_t gemm_state_count(Device device);

// Whether libcublas.so.13 could be opened; the reason when it could not.
bool cublas_available();
std::string cublas_unavailable_reason();

}  // namespace grove::runtime
