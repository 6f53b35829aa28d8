// cuda-only behaviour of the cuda Platform: graph-owned memory and
// AutoFreeOnLaunch, exec update, kernel-node patches, captured cuBLAS GEMMs,
// cross-stream ordering, CUDA's own capture errors, and the no-device report.
// Every test but the last skips with "no CUDA device" where there is none.
#include "runtime/cuda/cuda_platform.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/blas.h"
#include "runtime/cuda/cuda_testing.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/graph_recording.h"
#include "runtime/rms_norm_gemv_kernel.h"
#include "runtime/tensor.h"
#include "runtime/testing/test_kernels.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

using ::grove::testing::launch_add;
using ::grove::testing::launch_scale;
using ::grove::testing::random_floats;
using ::grove::testing::TestKernel;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CudaPlatformTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    context_ = &device_context(kCudaDevice);
    stream_ = context_->create_stream();
    guard_ = std::make_unique<StreamGuard>(kCudaDevice, stream_);
  }

  Platform& platform() { return context_->platform(); }
  CachingAllocator& allocator() { return context_->allocator(); }

  Tensor upload(const std::vector<float>& values) {
    return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, kCudaDevice);
  }

  Tensor empty_f32(int64_t n) { return Tensor::empty({n}, DType::kF32, kCudaDevice); }

  // Launches out = a + b directly through the platform, for raw pointers.
  void launch_add_raw(const void* a, const void* b, void* out, int64_t n) {
    platform().launch_kernel(::grove::testing::test_kernel(kCudaDevice, TestKernel::kAdd),
                             ::grove::testing::launch_dims_for(n),
                             KernelArgs().add_pointer(a).add_pointer(b).add_pointer(out).add_i64(n),
                             stream_);
  }

  // Captures: out = 2x (pool memory), graph-owned g = out + x, copy g -> result
  // (pool memory). Returns the graph-owned pointer, which every launch re-creates.
  void* capture_with_graph_owned_memory(GraphRecording& recording, PoolId pool, const Tensor& x,
                                        Tensor& out, Tensor& result) {
    recording.capture_begin(stream_, pool);
    out = ::grove::testing::scale(x, 2.0f);
    void* graph_owned = cuda_testing::allocate_async(kCudaDevice, stream_, x.nbytes());
    launch_add_raw(out.data_ptr(), x.data_ptr(), graph_owned, x.numel());
    result = empty_f32(x.numel());
    platform().copy_async(result.data_ptr(), graph_owned, x.nbytes(), CopyKind::kDeviceToDevice,
                          stream_);
    recording.capture_end();
    return graph_owned;
  }

  DeviceContext* context_ = nullptr;
  StreamHandle stream_;
  std::unique_ptr<StreamGuard> guard_;
};

void expect_near_all(const std::vector<float>& actual, const std::vector<float>& expected,
                     float tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1.0f + std::fabs(expected[i])))
        << "element " << i;
  }
}

std::vector<float> scaled(const std::vector<float>& values, float factor) {
  std::vector<float> result(values);
  for (float& value : result) value *= factor;
  return result;
}

std::vector<float> summed(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> result(a);
  for (size_t i = 0; i < a.size(); ++i) result[i] += b[i];
  return result;
}

TEST_F(CudaPlatformTest, AutoFreeOnLaunchRelaunchesWhileGraphAndPoolMemoryAreLive) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 5000;
  Tensor x = upload(random_floats(rng, n));
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  Tensor out, result;
  void* graph_owned = capture_with_graph_owned_memory(recording, pool, x, out, result);
  InstantiateOptions options;
  options.auto_free_on_launch = true;
  options.upload_stream = stream_;
  recording.instantiate(options);
  for (int replay = 0; replay < 3; ++replay) {
    std::vector<float> values = random_floats(rng, n);
    x.copy_from_host(values.data());
    // `out` and `result` (pool memory) and the graph's own allocation from the
    // previous launch are all still live here.
    recording.replay(stream_);
    expect_near_all(result.to_vector<float>(), scaled(values, 3.0f), 1e-6f);
    expect_near_all(out.to_vector<float>(), scaled(values, 2.0f), 1e-6f);
  }
  platform().synchronize_stream(stream_);
  cuda_testing::free_memory(kCudaDevice, graph_owned);
}

TEST_F(CudaPlatformTest, RelaunchWithUnfreedGraphMemoryFailsWithoutAutoFreeOnLaunch) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 1000;
  std::vector<float> values = random_floats(rng, n);
  Tensor x = upload(values);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  Tensor out, result;
  void* graph_owned = capture_with_graph_owned_memory(recording, pool, x, out, result);
  InstantiateOptions options;
  options.auto_free_on_launch = false;
  options.upload_stream = stream_;
  recording.instantiate(options);
  recording.replay(stream_);
  expect_near_all(result.to_vector<float>(), scaled(values, 3.0f), 1e-6f);
  try {
    recording.replay(stream_);
    ADD_FAILURE() << "relaunch with unfreed graph memory should fail";
  } catch (const DeviceError& error) {
    EXPECT_PRED2(contains, error.what(), "cudaGraphLaunch");
  }
  platform().synchronize_stream(stream_);
  cuda_testing::free_memory(kCudaDevice, graph_owned);
}

TEST_F(CudaPlatformTest, ExecUpdateSwapsInNewArgumentsWhenTopologyMatches) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 3000;
  std::vector<float> first = random_floats(rng, n), second = random_floats(rng, n);
  Tensor x1 = upload(first), x2 = upload(second);
  Tensor y1 = empty_f32(n), y2 = empty_f32(n);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool);
  launch_scale(x1, y1, 2.0f);
  recording.capture_end();
  recording.instantiate();
  recording.replay(stream_);
  expect_near_all(y1.to_vector<float>(), scaled(first, 2.0f), 1e-6f);

  recording.capture_begin(stream_, pool);
  launch_scale(x2, y2, -3.0f);
  recording.capture_end();
  EXPECT_TRUE(recording.update());
  EXPECT_EQ(recording.last_update_reason(), "");
  std::vector<float> y1_before = y1.to_vector<float>();
  recording.replay(stream_);
  expect_near_all(y2.to_vector<float>(), scaled(second, -3.0f), 1e-6f);
  EXPECT_EQ(y1.to_vector<float>(), y1_before);
  // The updated graph's kernel node reports the new arguments.
  std::vector<KernelNodeInfo> nodes = recording.kernel_nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].args.slots[0], reinterpret_cast<uint64_t>(x2.data_ptr()));
}

TEST_F(CudaPlatformTest, ExecUpdateFallsBackToInstantiationWhenTopologyChanges) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 2048;
  std::vector<float> a = random_floats(rng, n), b = random_floats(rng, n);
  Tensor ta = upload(a), tb = upload(b), out = empty_f32(n), doubled = empty_f32(n);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool);
  launch_add(ta, tb, out);
  recording.capture_end();
  recording.instantiate();

  recording.capture_begin(stream_, pool);
  launch_add(ta, tb, out);
  launch_scale(out, doubled, 2.0f);
  recording.capture_end();
  EXPECT_FALSE(recording.update());
  EXPECT_PRED2(contains, recording.last_update_reason(), "cudaGraphExecUpdate");
  EXPECT_PRED2(contains, recording.last_update_reason(), "topology");
  recording.replay(stream_);
  expect_near_all(doubled.to_vector<float>(), scaled(summed(a, b), 2.0f), 1e-5f);
  EXPECT_EQ(recording.node_count(), 2u);
}

TEST_F(CudaPlatformTest, KernelNodePatchTakesEffectOnTheNextLaunchOnly) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 4096;
  std::vector<float> a = random_floats(rng, n), b = random_floats(rng, n),
                     c = random_floats(rng, n);
  Tensor ta = upload(a), tb = upload(b), tc = upload(c), out = empty_f32(n),
         snapshot = empty_f32(n);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool);
  launch_add(ta, tb, out);
  recording.capture_end();
  recording.instantiate();

  std::vector<KernelNodeInfo> nodes = recording.kernel_nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].launched_by_grove);
  EXPECT_EQ(nodes[0].kernel_name, "grove_test_add_f32");
  KernelArgs captured = KernelArgs()
                            .add_pointer(ta.data_ptr())
                            .add_pointer(tb.data_ptr())
                            .add_pointer(out.data_ptr())
                            .add_i64(n);
  EXPECT_EQ(nodes[0].args, captured);

  // The first launch is enqueued before the patch; it must still add b.
  recording.replay(stream_);
  KernelArgs patched = captured;
  patched.slots[1] = reinterpret_cast<uint64_t>(tc.data_ptr());
  recording.set_kernel_node_args(0, patched);
  platform().copy_async(snapshot.data_ptr(), out.data_ptr(), out.nbytes(),
                        CopyKind::kDeviceToDevice, stream_);
  recording.replay(stream_);
  expect_near_all(snapshot.to_vector<float>(), summed(a, b), 1e-6f);
  expect_near_all(out.to_vector<float>(), summed(a, c), 1e-6f);
  // The captured graph still describes what was captured.
  EXPECT_EQ(recording.kernel_nodes()[0].args, captured);
}

TEST_F(CudaPlatformTest, PatchingALibraryKernelNodeIsRejected) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  Tensor a = upload(random_floats(rng, 64)), c = empty_f32(64);
  prepare_gemm(kCudaDevice, stream_);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool);
  GemmArgs args;
  args.m = args.n = args.k = 8;
  args.a = args.b = a.data_ptr();
  args.c = c.data_ptr();
  args.lda = args.ldb = args.ldc = 8;
  gemm(kCudaDevice, stream_, args);
  recording.capture_end();
  recording.instantiate();
  std::vector<KernelNodeInfo> nodes = recording.kernel_nodes();
  ASSERT_FALSE(nodes.empty());
  EXPECT_FALSE(nodes[0].launched_by_grove);
  EXPECT_THROW(recording.set_kernel_node_args(0, KernelArgs().add_i64(1)), Error);
}

// Row-major reference: C[m x n] = A[m x k] * B[k x n], accumulated in double.
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t n, int64_t k) {
  std::vector<float> c(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += double{a[i * k + p]} * b[p * n + j];
      c[i * n + j] = static_cast<float>(sum);
    }
  }
  return c;
}

TEST_F(CudaPlatformTest, CapturedCublasGemmReplaysWithCorrectResults) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  const int64_t m = 33, n = 65, k = 47;
  std::vector<float> a = random_floats(rng, m * k, -1.0f, 1.0f);
  std::vector<float> b = random_floats(rng, k * n, -1.0f, 1.0f);
  Tensor ta = Tensor::from_vector(a, {m, k}, kCudaDevice);
  Tensor tb = Tensor::from_vector(b, {k, n}, kCudaDevice);
  Tensor tc = Tensor::empty({m, n}, DType::kF32, kCudaDevice);
  prepare_gemm(kCudaDevice, stream_);
  size_t reserved_before = allocator().stats(kDefaultPool).reserved_bytes;

  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool);
  GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = ta.data_ptr();
  args.lda = k;
  args.b = tb.data_ptr();
  args.ldb = n;
  args.c = tc.data_ptr();
  args.ldc = n;
  gemm_row_major(kCudaDevice, stream_, args);
  recording.capture_end();
  recording.instantiate();
  EXPECT_EQ(allocator().stats(pool).reserved_bytes, 0u) << "a captured GEMM must not allocate";
  EXPECT_EQ(allocator().stats(kDefaultPool).reserved_bytes, reserved_before);

  for (int replay = 0; replay < 3; ++replay) {
    if (replay > 0) {
      a = random_floats(rng, m * k, -1.0f, 1.0f);
      ta.copy_from_host(a.data());
    }
    recording.replay(stream_);
    expect_near_all(tc.to_vector<float>(), host_matmul(a, b, m, n, k), 1e-4f);
  }
}

// Note [GEMM algorithms by measurement]: with GROVE_GEMM_SEARCH=1 a plain
// GEMM and one with a bias epilogue (beta 1: C is read) run the algorithm the
// search timed, eagerly and in a captured graph: both match the host's sums,
// a replay gives the eager call's bits, and C's padding columns are untouched
// (the search ran on scratch operands, not on C).
TEST_F(CudaPlatformTest, SearchedGemmAlgorithmsMatchTheHostAndReplayBitwise) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  ::setenv("GROVE_GEMM_SEARCH", "1", 1);
  const int64_t m = 272, n = 200, k = 192, ldc = n + 8;
  for (GemmEpilogue epilogue : {GemmEpilogue::kNone, GemmEpilogue::kBias}) {
    SCOPED_TRACE(gemm_epilogue_name(epilogue));
    std::vector<float> a = random_floats(rng, m * k, -1.0f, 1.0f);
    std::vector<float> b = random_floats(rng, k * n, -1.0f, 1.0f);
    std::vector<float> bias = random_floats(rng, n, -1.0f, 1.0f);
    std::vector<float> c0 = random_floats(rng, m * ldc, -1.0f, 1.0f);
    Tensor ta = Tensor::from_vector(a, {m, k}, kCudaDevice);
    Tensor tb = Tensor::from_vector(b, {k, n}, kCudaDevice);
    Tensor tbias = Tensor::from_vector(bias, {n}, kCudaDevice);
    Tensor tc = Tensor::from_vector(c0, {m, ldc}, kCudaDevice);
    GemmArgs args;
    args.m = m, args.n = n, args.k = k;
    args.a = ta.data_ptr(), args.lda = k;
    args.b = tb.data_ptr(), args.ldb = n;
    args.c = tc.data_ptr(), args.ldc = ldc;
    args.beta = 1.0f;
    args.epilogue = epilogue;
    if (epilogue == GemmEpilogue::kBias) args.bias = tbias.data_ptr();
    platform().blas().gemm_row_major(stream_, args);
    const std::vector<float> eager = tc.to_vector<float>();
    const std::vector<float> product = host_matmul(a, b, m, n, k);
    std::vector<float> expected(c0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        expected[i * ldc + j] +=
            product[i * n + j] + (epilogue == GemmEpilogue::kBias ? bias[j] : 0.0f);
      }
    }
    expect_near_all(eager, expected, 1e-4f);
    tc.copy_from_host(c0.data());
    PoolId pool = allocator().create_pool();
    {
      GraphRecording recording(kCudaDevice);
      recording.capture_begin(stream_, pool);
      platform().blas().gemm_row_major(stream_, args);
      recording.capture_end();
      recording.instantiate();
      recording.replay(stream_);
      EXPECT_EQ(tc.to_vector<float>(), eager);
    }
    allocator().release_pool(pool);
  }
  ::unsetenv("GROVE_GEMM_SEARCH");
}

// GROVE_CUBLASLT_WORKSPACE_CAP: a bias GEMM of BERT's shape planned for at
// most 1 MiB of workspace (or none) matches the host's sums, and a value
// that is not a number of bytes is a ConfigError that runs nothing.
TEST_F(CudaPlatformTest, GemmsPlannedUnderAWorkspaceCapMatchTheHost) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  const int64_t m = 384, n = 256, k = 1024;
  std::vector<float> a = random_floats(rng, m * k, -1.0f, 1.0f);
  std::vector<float> b = random_floats(rng, k * n, -1.0f, 1.0f);
  std::vector<float> bias = random_floats(rng, n, -1.0f, 1.0f);
  Tensor ta = Tensor::from_vector(a, {m, k}, kCudaDevice);
  Tensor tb = Tensor::from_vector(b, {k, n}, kCudaDevice);
  Tensor tbias = Tensor::from_vector(bias, {n}, kCudaDevice);
  Tensor tc = Tensor::empty({m, n}, DType::kF32, kCudaDevice);
  GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.a = ta.data_ptr(), args.lda = k;
  args.b = tb.data_ptr(), args.ldb = n;
  args.c = tc.data_ptr(), args.ldc = n;
  args.epilogue = GemmEpilogue::kBias;
  args.bias = tbias.data_ptr();
  std::vector<float> expected = host_matmul(a, b, m, n, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) expected[i * n + j] += bias[j];
  }
  for (const char* cap : {"1048576", "0"}) {
    SCOPED_TRACE(cap);
    ::setenv("GROVE_CUBLASLT_WORKSPACE_CAP", cap, 1);
    platform().blas().gemm_row_major(stream_, args);
    expect_near_all(tc.to_vector<float>(), expected, 1e-3f);
  }
  ::setenv("GROVE_CUBLASLT_WORKSPACE_CAP", "1 MiB", 1);
  EXPECT_THROW(platform().blas().gemm_row_major(stream_, args), ConfigError);
  ::unsetenv("GROVE_CUBLASLT_WORKSPACE_CAP");
}

// Note [cuBLAS state of destroyed streams]: streams created and destroyed in
// turn, each running a GEMM, share one workspace instead of keeping one each,
// and a GEMM on a stream that inherited it is still right.
TEST_F(CudaPlatformTest, DestroyedStreamsHandTheirCublasStateToTheNextStream) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 16;
  std::vector<float> a = random_floats(rng, n * n), b = random_floats(rng, n * n);
  Tensor ta = Tensor::from_vector(a, {n, n}, kCudaDevice);
  Tensor tb = Tensor::from_vector(b, {n, n}, kCudaDevice);
  Tensor tc = Tensor::empty({n, n}, DType::kF32, kCudaDevice);
  GemmArgs args;
  args.m = args.n = args.k = n;
  args.a = ta.data_ptr(), args.lda = n;
  args.b = tb.data_ptr(), args.ldb = n;
  args.c = tc.data_ptr(), args.ldc = n;
  platform().synchronize_stream(stream_);
  size_t before = gemm_state_count(kCudaDevice);
  for (int round = 0; round < 20; ++round) {
    StreamHandle stream = platform().create_stream();
    gemm_row_major(kCudaDevice, stream, args);
    platform().synchronize_stream(stream);
    expect_near_all(tc.to_vector<float>(), host_matmul(a, b, n, n, n), 1e-4f);
    platform().destroy_stream(stream);
  }
  EXPECT_LE(gemm_state_count(kCudaDevice), before + 1);
}

// Note [cuBLAS workspace after cublasSetStream]: a stream that inherits a
// destroyed stream's handle keeps its workspace, so a GEMM captured on it is
// kernels only (cuBLAS's own pool would add mem alloc / free nodes, which a
// WHILE body refuses). The shapes are the LLaMA-1B decode GEMMs at batch 1,
// whose split-K kernels want a workspace.
TEST_F(CudaPlatformTest, GemmCapturedOnAnInheritedHandleHoldsKernelsOnly) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  StreamHandle first = platform().create_stream();
  prepare_gemm(kCudaDevice, first);
  platform().destroy_stream(first);  // its handle goes to the next stream
  StreamHandle stream = platform().create_stream();
  const int64_t shapes[][2] = {{2048, 8192}, {8192, 2048}, {2048, 2048}, {32000, 2048}};
  for (const auto& [n, k] : shapes) {
    Tensor x = Tensor::empty({1, k}, DType::kBF16, kCudaDevice);
    Tensor w = Tensor::empty({n, k}, DType::kBF16, kCudaDevice);  // values do not matter
    Tensor y = Tensor::empty({1, n}, DType::kBF16, kCudaDevice);
    GemmArgs args;
    args.dtype = DType::kBF16;
    args.m = 1;
    args.n = n;
    args.k = k;
    args.a = x.data_ptr(), args.lda = k;
    args.b = w.data_ptr(), args.ldb = k, args.transpose_b = true;
    args.c = y.data_ptr(), args.ldc = n;
    gemm_row_major(kCudaDevice, stream, args);  // eager first, as a recording does
    platform().synchronize_stream(stream);
    platform().begin_capture(stream, CaptureMode::kThreadLocal);
    gemm_row_major(kCudaDevice, stream, args);
    GraphHandle graph = platform().end_capture(stream);
    EXPECT_EQ(platform().graph_node_count(graph), platform().kernel_nodes(graph).size())
        << "1 x " << n << " x " << k << ": a captured GEMM holds nodes besides kernels";
    platform().destroy_graph(graph);
  }
  platform().synchronize_stream(stream);
  platform().destroy_stream(stream);
}

TEST_F(CudaPlatformTest, StridedBatchedBf16GemmMatchesHostReference) {
  ASSERT_TRUE(cublas_available()) << cublas_unavailable_reason();
  GROVE_SEEDED_RNG(rng);
  const int64_t batch = 3, m = 16, n = 24, k = 40;
  std::vector<float> a = random_floats(rng, batch * m * k, -1.0f, 1.0f);
  std::vector<float> b = random_floats(rng, batch * k * n, -1.0f, 1.0f);
  std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a_bits[i] = float_to_bf16_bits(a[i]);
    a[i] = bf16_bits_to_float(a_bits[i]);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    b_bits[i] = float_to_bf16_bits(b[i]);
    b[i] = bf16_bits_to_float(b_bits[i]);
  }
  Tensor ta = Tensor::from_host(a_bits.data(), {batch, m, k}, DType::kBF16, kCudaDevice);
  Tensor tb = Tensor::from_host(b_bits.data(), {batch, k, n}, DType::kBF16, kCudaDevice);
  Tensor tc = Tensor::empty({batch, m, n}, DType::kBF16, kCudaDevice);
  GemmArgs args;
  args.dtype = DType::kBF16;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = ta.data_ptr();
  args.lda = k;
  args.stride_a = m * k;
  args.b = tb.data_ptr();
  args.ldb = n;
  args.stride_b = k * n;
  args.c = tc.data_ptr();
  args.ldc = n;
  args.stride_c = m * n;
  args.batch_count = batch;
  gemm_row_major(kCudaDevice, stream_, args);
  std::vector<uint16_t> c_bits = tc.to_vector<uint16_t>();
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<float> a_i(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    std::vector<float> b_i(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    std::vector<float> expected = host_matmul(a_i, b_i, m, n, k);
    for (int64_t j = 0; j < m * n; ++j) {
      ASSERT_NEAR(bf16_bits_to_float(c_bits[i * m * n + j]), expected[j],
                  1e-2f * (1.0f + std::fabs(expected[j])))
          << "batch " << i << " element " << j;
    }
  }
}

// Note [Small-M GEMV]: decode-shaped GEMMs through the device's BLAS run
// grove's kernel; every row count, both dtypes, beta 0 and 1, a K whose
// vectors leave a tail after the unrolled loads, padded leading dimensions
// and a C column count that leaves the last block partly idle match the
// host's sums, and C's padding columns stay as they were.
TEST_F(CudaPlatformTest, SmallMGemvMatchesHostReference) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = 37, k = 1096, lda = 1104, ldb = 1112, ldc = 41;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 2, 4, 8}) {
      for (float beta : {0.0f, 1.0f}) {  // beta 1: C += the product (linear_residual)
        auto to_bits = [&](float value) {
          return dtype == DType::kBF16 ? float_to_bf16_bits(value) : float_to_f16_bits(value);
        };
        auto to_float = [&](uint16_t bits) {
          return dtype == DType::kBF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
        };
        std::vector<uint16_t> a_bits, w_bits, c_bits;
        for (float value : random_floats(rng, m * lda, -1.0f, 1.0f))
          a_bits.push_back(to_bits(value));
        for (float value : random_floats(rng, n * ldb, -1.0f, 1.0f))
          w_bits.push_back(to_bits(value));
        for (float value : random_floats(rng, m * ldc, -4.0f, 4.0f))
          c_bits.push_back(to_bits(value));
        Tensor ta = Tensor::from_host(a_bits.data(), {m, lda}, dtype, kCudaDevice);
        Tensor tw = Tensor::from_host(w_bits.data(), {n, ldb}, dtype, kCudaDevice);
        Tensor tc = Tensor::from_host(c_bits.data(), {m, ldc}, dtype, kCudaDevice);
        GemmArgs args;
        args.dtype = dtype;
        args.m = m, args.n = n, args.k = k;
        args.a = ta.data_ptr(), args.lda = lda;
        args.b = tw.data_ptr(), args.ldb = ldb, args.transpose_b = true;
        args.c = tc.data_ptr(), args.ldc = ldc;
        args.beta = beta;
        platform().blas().gemm_row_major(stream_, args);
        std::vector<uint16_t> result = tc.to_vector<uint16_t>();
        for (int64_t row = 0; row < m; ++row) {
          for (int64_t column = 0; column < ldc; ++column) {
            const float got = to_float(result[row * ldc + column]);
            const float before = to_float(c_bits[row * ldc + column]);
            if (column >= n) {
              EXPECT_EQ(got, before) << "m " << m << ": column " << column << " is past C's n";
              continue;
            }
            double expected = beta * before;
            for (int64_t i = 0; i < k; ++i) {
              expected +=
                  double(to_float(a_bits[row * lda + i])) * to_float(w_bits[column * ldb + i]);
            }
            ASSERT_NEAR(got, expected, 1e-2 * (1.0 + std::fabs(expected)))
                << dtype_name(dtype) << " m " << m << " beta " << beta << " row " << row
                << " column " << column;
          }
        }
      }
    }
  }
}

// Note [Small-M GEMV]: the LLaMA-1B decode GEMMs at batch 1 are one kernel
// node each in a captured graph (cuBLAS used split-K pairs for some).
TEST_F(CudaPlatformTest, SmallMGemvIsOneKernelInACapturedGraph) {
  const int64_t shapes[][2] = {{2048, 8192}, {16384, 2048}, {3072, 2048}, {32000, 2048}};
  for (const auto& [n, k] : shapes) {
    Tensor x = Tensor::empty({1, k}, DType::kBF16, kCudaDevice);
    Tensor w = Tensor::empty({n, k}, DType::kBF16, kCudaDevice);  // values do not matter
    Tensor y = Tensor::empty({1, n}, DType::kBF16, kCudaDevice);
    GemmArgs args;
    args.dtype = DType::kBF16;
    args.m = 1, args.n = n, args.k = k;
    args.a = x.data_ptr(), args.lda = k;
    args.b = w.data_ptr(), args.ldb = k, args.transpose_b = true;
    args.c = y.data_ptr(), args.ldc = n;
    platform().blas().gemm_row_major(stream_, args);
    platform().synchronize_stream(stream_);
    platform().begin_capture(stream_, CaptureMode::kThreadLocal);
    platform().blas().gemm_row_major(stream_, args);
    GraphHandle graph = platform().end_capture(stream_);
    std::vector<KernelNodeInfo> nodes = platform().kernel_nodes(graph);
    EXPECT_EQ(platform().graph_node_count(graph), 1u) << "1 x " << n << " x " << k;
    ASSERT_EQ(nodes.size(), 1u) << "1 x " << n << " x " << k;
    EXPECT_EQ(nodes[0].kernel_name, streamed_gemv_enabled(StreamedGemvs::kBlas)
                                        ? str_cat("grove_small_m_gemv_streamed_bf16",
                                                  streamed_gemv_a_shared(n) && k <= 8192 ? "_as"
                                                  : streamed_gemv_deep_slots(n)          ? "_s32"
                                                                                         : "")
                                        : "grove_small_m_gemv_bf16_m1");
    platform().destroy_graph(graph);
  }
}

// GROVE_STREAMED_GEMV, GROVE_WEIGHTS_EVICT_FIRST, GROVE_STREAMED_GEMV_SLOTS
// and GROVE_GEMV_A_SHARED for the streamed GEMV tests, and the kernel each
// setting launches; GROVE_STREAMED_GEMV_BLOCKS, the streamed grids' blocks an
// SM (the RMSNorm GEMVs hold A in shared memory and ignore GROVE_GEMV_A_SHARED).
struct GemvSetting {
  const char* name;
  const char* streamed;
  const char* evict;
  const char* slots;
  const char* a_shared;
  const char* kernel_suffix;  // after grove_small_m_gemv_streamed_<dtype>, or "m1"
  const char* blocks = "";    // GROVE_STREAMED_GEMV_BLOCKS: blocks an SM
  // GROVE_GEMV_ALLOW_NEXT_FIRST and GROVE_GEMV_RESIDUAL_FIRST (Note [Streamed GEMV
  // allows the next kernel first], Note [Streamed GEMV reads C first]).
  const char* allow_next_first = "";
  const char* residual_first = "";
  // GROVE_GEMV_ROW_IN_REGISTERS (Note [RMSNorm GEMV keeps its row in registers])
  const char* row_in_registers = "";
  // GROVE_GEMV_PREFETCH_COLUMNS (Note [Streamed GEMV prefetches columns into L2])
  const char* prefetch_columns = "";
};
// The first is the default kernel, the reference of the rest: warp per column, weights
// evicted first, 32 slots (Note [Streamed GEMV slots]), A in shared memory (Note [Streamed GEMV
// holds A in shared memory]) under either eviction policy (the decode step's is evict-first:
// session 20's A-ahead kernels faulted under it, and only it had not been tested), other grids.
constexpr GemvSetting kGemvSettings[] = {
    {"streamed", "1", "0", "", "0", ""},
    {"warp-per-column", "0", "0", "", "0", "m1"},
    {"evict-first", "1", "1", "", "0", ""},
    {"deep-slot", "1", "0", "deep", "0", "_s32"},
    {"deep-slot evict-first", "1", "1", "deep", "0", "_s32"},
    {"A-in-shared-memory", "1", "0", "", "1", "_as"},
    {"A-in-shared-memory evict-first", "1", "1", "", "1", "_as"},
    {"A-in-shared-memory 3 blocks an SM", "1", "1", "", "1", "_as", "3"},
    {"A-in-shared-memory up to 4096 columns", "1", "1", "", "auto", "_as"},
    {"1 block an SM", "1", "0", "", "0", "", "1"},
    {"next kernel first, C first, evict-first", "1", "1", "", "0", "", "", "1", "1"},
    {"next kernel first, C first, deep-slot", "1", "0", "deep", "0", "_s32", "", "1", "1"},
    {"next kernel first, C first, A-in-shared-memory", "1", "1", "", "1", "_as", "", "1", "1"},
    {"row in registers", "1", "1", "", "0", "", "", "", "", "1"},
    {"next kernel after the wait, C after the sum, row read twice", "1", "1", "", "0", "", "", "0",
     "0", "0"},
    {"3 columns prefetched into L2", "1", "1", "", "0", "", "", "", "", "", "3"}};

// Runs the one-row GEMV C = beta C + A W^T of each setting (random bf16 and f16
// operands of each shape, beta 0 and 1) and expects the first setting's bits
// from every other, the kernel each names, and a product that changed C.
// K above 8192 takes the 24-slot kernel where A in shared memory was asked for.
template <size_t kCount>
void expect_streamed_gemvs_match(Platform& platform, StreamHandle stream, std::mt19937& rng,
                                 const GemvSetting (&settings)[kCount],
                                 std::initializer_list<std::array<int64_t, 3>> shapes) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const char* type = dtype == DType::kBF16 ? "bf16" : "f16";
    for (const auto& [n, k, ldb] : shapes) {
      for (float beta : {0.0f, 1.0f}) {
        auto to_bits = [&](float value) {
          return dtype == DType::kBF16 ? float_to_bf16_bits(value) : float_to_f16_bits(value);
        };
        std::vector<uint16_t> a_bits, w_bits, c_bits;
        for (float value : random_floats(rng, k, -1.0f, 1.0f)) a_bits.push_back(to_bits(value));
        for (float value : random_floats(rng, n * ldb, -1.0f, 1.0f))
          w_bits.push_back(to_bits(value));
        for (float value : random_floats(rng, n, -4.0f, 4.0f)) c_bits.push_back(to_bits(value));
        Tensor ta = Tensor::from_host(a_bits.data(), {1, k}, dtype, kCudaDevice);
        Tensor tw = Tensor::from_host(w_bits.data(), {n, ldb}, dtype, kCudaDevice);
        std::vector<std::vector<uint16_t>> results;
        for (const GemvSetting& setting : settings) {
          ::grove::testing::ScopedEnv streamed("GROVE_STREAMED_GEMV", setting.streamed);
          ::grove::testing::ScopedEnv eviction("GROVE_WEIGHTS_EVICT_FIRST", setting.evict);
          ::grove::testing::ScopedEnv depth("GROVE_STREAMED_GEMV_SLOTS", setting.slots);
          ::grove::testing::ScopedEnv shared("GROVE_GEMV_A_SHARED", setting.a_shared);
          ::grove::testing::ScopedEnv blocks("GROVE_STREAMED_GEMV_BLOCKS", setting.blocks);
          ::grove::testing::ScopedEnv next_first("GROVE_GEMV_ALLOW_NEXT_FIRST",
                                                 setting.allow_next_first);
          ::grove::testing::ScopedEnv c_first("GROVE_GEMV_RESIDUAL_FIRST", setting.residual_first);
          ::grove::testing::ScopedEnv prefetch("GROVE_GEMV_PREFETCH_COLUMNS",
                                               setting.prefetch_columns);
          Tensor tc = Tensor::from_host(c_bits.data(), {1, n}, dtype, kCudaDevice);
          GemmArgs args;
          args.dtype = dtype;
          args.m = 1, args.n = n, args.k = k;
          args.a = ta.data_ptr(), args.lda = k;
          args.b = tw.data_ptr(), args.ldb = ldb, args.transpose_b = true;
          args.c = tc.data_ptr(), args.ldc = n;
          args.beta = beta;
          platform.begin_capture(stream, CaptureMode::kThreadLocal);
          platform.blas().gemm_row_major(stream, args);
          GraphHandle graph = platform.end_capture(stream);
          std::vector<KernelNodeInfo> nodes = platform.kernel_nodes(graph);
          ASSERT_EQ(nodes.size(), 1u);
          // A in shared memory up to K = 8192, and under auto up to 4096 columns.
          const bool shared_a =
              k <= 8192 && (std::string(setting.a_shared) == "1" ||
                            (std::string(setting.a_shared) == "auto" && n <= 4096));
          const std::string suffix =
              std::string(setting.kernel_suffix) == "_as" && !shared_a ? "" : setting.kernel_suffix;
          EXPECT_EQ(nodes[0].kernel_name,
                    suffix == "m1" ? str_cat("grove_small_m_gemv_", type, "_m1")
                                   : str_cat("grove_small_m_gemv_streamed_", type, suffix))
              << setting.name << " k " << k;
          GraphExecHandle exec = platform.instantiate(graph, {});
          platform.launch_graph(exec, stream);
          platform.synchronize_stream(stream);
          platform.destroy_graph_exec(exec);
          platform.destroy_graph(graph);
          results.push_back(tc.to_vector<uint16_t>());
        }
        for (size_t other = 1; other < kCount; ++other) {
          size_t differ = 0;
          for (size_t i = 0; i < results[0].size(); ++i) {
            differ += results[0][i] != results[other][i];
          }
          EXPECT_EQ(differ, 0u) << type << " n " << n << " k " << k << " beta " << beta << ": "
                                << settings[0].name << " and " << settings[other].name
                                << " results differ";
        }
        // And the product is not trivially zero: a sum changed C somewhere.
        size_t changed = 0;
        for (int64_t i = 0; i < n; ++i) changed += results[0][i] != c_bits[i];
        EXPECT_GT(changed, static_cast<size_t>(n / 2)) << type << " n " << n << " k " << k;
      }
    }
  }
}

// Note [Streamed GEMV]: for one row of A the streamed kernel (GROVE_STREAMED_GEMV
// unset or 1) folds each lane's vectors in the warp-per-column kernel's order, so
// both give the same bits: shapes where warps take several columns (n above the
// grid's warps), K whose vectors do not divide among the lanes, a row stride
// past K, and beta 0 and 1; the LLaMA-1B decode step's three (output and down
// projections, LM head) and K past the A-in-shared-memory kernel's 8192.
TEST_F(CudaPlatformTest, StreamedGemvMatchesWarpPerColumnBitwise) {
  GROVE_SEEDED_RNG(rng);
  expect_streamed_gemvs_match(platform(), stream_, rng, kGemvSettings,
                              {{3001, 1096, 1112},
                               {2048, 8192, 8192},
                               {5, 64, 64},
                               {2048, 2048, 2048},
                               {32000, 2048, 2048},
                               {300, 8200, 8200}});
}

// Note [Streamed GEMV]: the streamed RMSNorm GEMVs (plain, f32 out, gated)
// give the warp-per-column kernels' bits, for column counts above the grid's
// warps and K whose vectors do not divide among the lanes.
TEST_F(CudaPlatformTest, StreamedRmsNormGemvMatchesWarpPerColumnBitwise) {
  GROVE_SEEDED_RNG(rng);
  const int64_t shapes[][2] = {{3001, 1096}, {2048, 2048}, {7, 64}};
  for (const auto& [n, k] : shapes) {
    for (int variant = 0; variant < 3; ++variant) {  // plain, f32 out, gated
      const bool gated = variant == 2;
      const DType out_dtype = variant == 1 ? DType::kF32 : DType::kBF16;
      auto bf16 = [&](int64_t count, float low, float high) {
        std::vector<uint16_t> bits;
        for (float value : random_floats(rng, count, low, high))
          bits.push_back(float_to_bf16_bits(value));
        return Tensor::from_host(bits.data(), {count}, DType::kBF16, kCudaDevice);
      };
      Tensor x = bf16(k, -2.0f, 2.0f).view({1, k});
      Tensor gain = bf16(k, 0.5f, 1.5f);
      const int64_t w_rows = gated ? 2 * n : n;
      Tensor w = bf16(w_rows * k, -0.1f, 0.1f).view({w_rows, k});
      std::vector<std::vector<uint8_t>> results;
      for (const GemvSetting& setting : kGemvSettings) {
        ::grove::testing::ScopedEnv streamed("GROVE_STREAMED_GEMV", setting.streamed);
        ::grove::testing::ScopedEnv eviction("GROVE_WEIGHTS_EVICT_FIRST", setting.evict);
        ::grove::testing::ScopedEnv depth("GROVE_STREAMED_GEMV_SLOTS", setting.slots);
        ::grove::testing::ScopedEnv shared("GROVE_GEMV_A_SHARED", setting.a_shared);
        ::grove::testing::ScopedEnv blocks("GROVE_STREAMED_GEMV_BLOCKS", setting.blocks);
        ::grove::testing::ScopedEnv next_first("GROVE_GEMV_ALLOW_NEXT_FIRST",
                                               setting.allow_next_first);
        ::grove::testing::ScopedEnv registers("GROVE_GEMV_ROW_IN_REGISTERS",
                                              setting.row_in_registers);
        ::grove::testing::ScopedEnv prefetch("GROVE_GEMV_PREFETCH_COLUMNS",
                                             setting.prefetch_columns);
        Tensor out = Tensor::empty({1, n}, out_dtype, kCudaDevice);
        launch_rms_norm_gemv(x, gain, w, out, 1e-5, gated, stream_);
        platform().synchronize_stream(stream_);
        results.push_back(out.to_host_bytes());
      }
      for (size_t other = 1; other < std::size(kGemvSettings); ++other) {
        EXPECT_EQ(results[0], results[other])
            << "variant " << variant << " n " << n << " k " << k << ": streamed and "
            << kGemvSettings[other].name << " results differ";
      }
      size_t nonzero = 0;
      for (uint8_t byte : results[0]) nonzero += byte != 0;
      EXPECT_GT(nonzero, results[0].size() / 4) << "variant " << variant << " n " << n;
    }
  }
}

// Note [Programmatic dependent launch]: a chain of small-M GEMVs, each reading
// the one before (a wide one first, whose tail the next may overlap), captured
// and replayed with new inputs, equals the host's products: every kernel
// waits for the one before it. On compute capability 9.0+ the captured chain
// is joined by programmatic edges, on older devices by default ones.
class ProgrammaticGemvChain {
 public:
  ProgrammaticGemvChain(std::mt19937& rng, Platform& platform, StreamHandle stream)
      : platform_(platform), stream_(stream) {
    for (int i = 0; i < 3; ++i) {
      weights_.push_back(random_bf16(rng, kShapes[i][0] * kShapes[i][1]));
      w_.push_back(upload(weights_.back(), {kShapes[i][0], kShapes[i][1]}));
      out_.push_back(Tensor::empty({1, kShapes[i][0]}, DType::kBF16, kCudaDevice));
    }
    x_ = Tensor::empty({1, kShapes[0][1]}, DType::kBF16, kCudaDevice);
  }

  // x -> x W0^T -> (..) W1^T -> (..) W2^T, enqueued on the stream.
  void enqueue() {
    const Tensor* a = &x_;
    for (int i = 0; i < 3; ++i) {
      GemmArgs args;
      args.dtype = DType::kBF16;
      args.m = 1, args.n = kShapes[i][0], args.k = kShapes[i][1];
      args.a = a->data_ptr(), args.lda = args.k;
      args.b = w_[i].data_ptr(), args.ldb = args.k, args.transpose_b = true;
      args.c = out_[i].data_ptr(), args.ldc = args.n;
      platform_.blas().gemm_row_major(stream_, args);
      a = &out_[i];
    }
  }

  void set_input(const std::vector<uint16_t>& x) {
    x_host_ = x;
    platform_.copy_async(x_.data_ptr(), x.data(), x.size() * 2, CopyKind::kHostToDevice, stream_);
    platform_.synchronize_stream(stream_);
  }

  // The chain's last product against the host's, each stage rounded to bf16 as stored.
  void expect_host_result(const std::string& what) {
    std::vector<float> a;
    for (uint16_t bits : x_host_) a.push_back(bf16_bits_to_float(bits));
    for (int i = 0; i < 3; ++i) {
      std::vector<float> next(static_cast<size_t>(kShapes[i][0]));
      for (int64_t n = 0; n < kShapes[i][0]; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < kShapes[i][1]; ++k) {
          sum += double(a[k]) * bf16_bits_to_float(weights_[i][n * kShapes[i][1] + k]);
        }
        next[n] = bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(sum)));
      }
      a = next;
    }
    // Within the rounding of the sums (another order than the host's); a stage
    // that read its input too early would be off by the values' own size.
    double squares = 0;
    for (float value : a) squares += double(value) * value;
    const double rms = std::sqrt(squares / static_cast<double>(a.size()));
    std::vector<uint16_t> got = out_[2].to_vector<uint16_t>();
    for (size_t n = 0; n < a.size(); ++n) {
      ASSERT_NEAR(bf16_bits_to_float(got[n]), a[n], 0.03 * rms + 0.01 * std::fabs(a[n]))
          << what << ": column " << n << " (values' rms " << rms << ")";
    }
  }

  static std::vector<uint16_t> random_bf16(std::mt19937& rng, int64_t count) {
    std::vector<uint16_t> bits;
    for (float value : random_floats(rng, count, -1.0f, 1.0f)) {
      bits.push_back(float_to_bf16_bits(value * 0.05f));
    }
    return bits;
  }

  // {N, K}: 16384 columns (a grid of 4096 blocks), then K = 16384 over them, then a small one.
  static constexpr int64_t kShapes[3][2] = {{16384, 1024}, {256, 16384}, {64, 256}};

 private:
  static Tensor upload(const std::vector<uint16_t>& bits, std::vector<int64_t> shape) {
    return Tensor::from_host(bits.data(), shape, DType::kBF16, kCudaDevice);
  }

  Platform& platform_;
  StreamHandle stream_;
  std::vector<std::vector<uint16_t>> weights_;
  std::vector<Tensor> w_, out_;
  Tensor x_;
  std::vector<uint16_t> x_host_;
};

TEST_F(CudaPlatformTest, ProgrammaticGemvChainMatchesTheHostAndLeavesProgrammaticEdges) {
  GROVE_SEEDED_RNG(rng);
  ProgrammaticGemvChain chain(rng, platform(), stream_);
  chain.set_input(ProgrammaticGemvChain::random_bf16(rng, ProgrammaticGemvChain::kShapes[0][1]));
  chain.enqueue();  // stream launches
  platform().synchronize_stream(stream_);
  chain.expect_host_result("launched on the stream");
  platform().begin_capture(stream_, CaptureMode::kThreadLocal);
  chain.enqueue();
  GraphHandle graph = platform().end_capture(stream_);
  const bool programmatic = cuda_testing::runs_programmatic_launches(kCudaDevice);
  EXPECT_EQ(platform().graph_programmatic_edge_count(graph), programmatic ? 2u : 0u)
      << (programmatic ? "compute capability 9.0+" : "older device or GROVE_PROGRAMMATIC_LAUNCH=0");
  GraphExecHandle exec = platform().instantiate(graph, InstantiateOptions{});
  for (int replay = 0; replay < 3; ++replay) {
    chain.set_input(ProgrammaticGemvChain::random_bf16(rng, ProgrammaticGemvChain::kShapes[0][1]));
    platform().launch_graph(exec, stream_);
    platform().synchronize_stream(stream_);
    chain.expect_host_result("replay " + std::to_string(replay));
  }
  platform().destroy_graph_exec(exec);
  platform().destroy_graph(graph);
}

TEST_F(CudaPlatformTest, GemmRejectsBadLeadingDimensionAndDtype) {
  GemmArgs args;
  args.m = 4;
  args.n = 4;
  args.k = 4;
  args.lda = 2;  // < m
  args.ldb = 4;
  args.ldc = 4;
  EXPECT_THROW(gemm(kCudaDevice, stream_, args), ShapeError);
  args.lda = 4;
  args.dtype = DType::kI32;
  EXPECT_THROW(gemm(kCudaDevice, stream_, args), DTypeError);
  EXPECT_THROW(gemm(kSimDevice, stream_, GemmArgs{}), DeviceError);
}

TEST_F(CudaPlatformTest, WorkOnAnotherStreamIsOrderedByEvents) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = int64_t{1} << 22;  // large enough that an unordered read would race
  std::vector<float> values = random_floats(rng, n);
  Tensor x = upload(values), y = empty_f32(n);
  StreamHandle producer = stream_;
  StreamHandle consumer = context_->create_stream();
  EventHandle start = platform().create_event(true), ready = platform().create_event(true);
  platform().record_event(start, producer);
  for (int i = 0; i < 20; ++i) ::grove::testing::launch_add_scalar_in_place(x, 0.5f);
  platform().record_event(ready, producer);
  platform().stream_wait_event(consumer, ready);
  {
    StreamGuard on_consumer(kCudaDevice, consumer);
    launch_scale(x, y, 2.0f);
  }
  platform().synchronize_stream(consumer);
  std::vector<float> expected(values);
  for (float& value : expected) value = (value + 10.0f) * 2.0f;
  StreamGuard on_consumer(kCudaDevice, consumer);
  expect_near_all(y.to_vector<float>(), expected, 1e-5f);
  EXPECT_GT(platform().elapsed_ms(start, ready), 0.0f);
  platform().destroy_event(start);
  platform().destroy_event(ready);
}

TEST_F(CudaPlatformTest, CaptureViolationsCarryCudasOwnError) {
  Tensor x = empty_f32(256);
  platform().begin_capture(stream_, CaptureMode::kThreadLocal);
  try {
    platform().synchronize_stream(stream_);
    ADD_FAILURE() << "synchronizing a capturing stream should throw";
  } catch (const CaptureViolation& violation) {
    EXPECT_PRED2(contains, violation.what(), "cudaStreamSynchronize");
    EXPECT_PRED2(contains, violation.what(), "cudaErrorStreamCaptureUnsupported");
  }
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kInvalidated);
  try {
    platform().end_capture(stream_);
    ADD_FAILURE() << "ending an invalidated capture should throw";
  } catch (const CaptureViolation& violation) {
    EXPECT_PRED2(contains, violation.what(), "cudaErrorStreamCaptureInvalidated");
  }
  // The stream is usable again.
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kNone);
  ::grove::testing::launch_fill(x, 1.5f);
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(256, 1.5f));
}

TEST_F(CudaPlatformTest, GroveInvalidatedCaptureFailsAtEnd) {
  platform().begin_capture(stream_, CaptureMode::kThreadLocal);
  platform().invalidate_capture(stream_);
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kInvalidated);
  EXPECT_THROW(platform().end_capture(stream_), CaptureViolation);
  EXPECT_EQ(platform().capture_status(stream_), CaptureStatus::kNone);
}

TEST_F(CudaPlatformTest, PoolGrowsDuringThreadLocalCaptureAndReplays) {
  GROVE_SEEDED_RNG(rng);
  const int64_t n = int64_t{3} << 20;  // 12 MiB: needs a new large segment during capture
  std::vector<float> values = random_floats(rng, n);
  Tensor x = upload(values);
  PoolId pool = allocator().create_pool();
  GraphRecording recording(kCudaDevice);
  recording.capture_begin(stream_, pool, CaptureMode::kThreadLocal);
  Tensor y = ::grove::testing::scale(x, 0.5f);
  recording.capture_end();
  EXPECT_GT(allocator().stats(pool).reserved_bytes, 0u);
  recording.instantiate();
  recording.replay(stream_);
  expect_near_all(y.to_vector<float>(), scaled(values, 0.5f), 1e-6f);
  EXPECT_PRED2(contains, recording.dot(), "digraph");
}

TEST_F(CudaPlatformTest, LoadingAKernelThatThePtxLacksNamesIt) {
  KernelSource source;
  source.name = "grove_no_such_kernel";
  source.ptx = ".version 8.0\n.target sm_80\n.address_size 64\n";
  try {
    platform().load_kernel(source);
    ADD_FAILURE() << "loading a missing kernel should throw";
  } catch (const DeviceError& error) {
    EXPECT_PRED2(contains, error.what(), "grove_no_such_kernel");
  }
}

// Runs everywhere: without a device, grove says why in CUDA's words.
TEST(CudaAvailability, ReportsWhyThereIsNoCudaDevice) {
  if (cuda_device_count() > 0) {
    EXPECT_EQ(cuda_unavailable_reason(), "");
    EXPECT_FALSE(device_context(kCudaDevice).platform().name().empty());
    return;
  }
  std::string reason = cuda_unavailable_reason();
  EXPECT_PRED2(contains, reason, "cudaGetDeviceCount");
  EXPECT_EQ(default_device(), kSimDevice);
  EXPECT_FALSE(device_available(kCudaDevice));
  try {
    device_context(kCudaDevice);
    ADD_FAILURE() << "cuda:0 should not be available";
  } catch (const DeviceError& error) {
    EXPECT_PRED2(contains, error.what(), "no CUDA device");
    EXPECT_PRED2(contains, error.what(), reason);
  }
}

}  // namespace
}  // namespace grove::runtime
