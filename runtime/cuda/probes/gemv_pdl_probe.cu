// A standalone probe (not part of the build; nvcc on a machine with CUDA 12.4+):
// how close batch-1 GEMVs of the LLaMA-1B decode step get to HBM bandwidth,
// and what programmatic dependent launch (PDL) buys between them, in CUDA
// graphs as the decoder replays them. It builds the step's weight stream
// (16 layers of qkv, o, gate/up and down weights and the LM head: 2.08 GB of
// bf16, more than L2 many times over), a stand-in for the attention kernel
// (8 blocks), and times one graph of the whole step per variant:
//   plain      the small-M GEMV as grove runs it (a warp per column, 16 loads in flight)
//   pdl        the same with griddepcontrol.wait/launch_dependents at the start, launched PDL
//   pdl_l2     pdl, and the warp's first weight batch prefetched to L2 before the wait
//   pdl_reg    pdl, and the first weight batch loaded into registers before the wait
//   split2     pdl_reg with two warps per column (each half of K) where N < 4096
//   stream16, stream24, str32x128, s24x128: the streamed GEMV (Note [Streamed GEMV],
//              runtime/cuda/small_m_gemv.h): slots x threads per block, a block or two per
//              SM, weights through cp.async slots, the first slots requested before the wait
// The per-kernel table also has the LM head (4 launches).
// It also checks that each variant computes what plain does (same order: bitwise), and
// whether a conditional WHILE body accepts the PDL edges.
//   nvcc -O3 -std=c++17 -arch=sm_90a -rdc=true -o gemv_pdl_probe gemv_pdl_probe.cu -lcudadevrt
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

constexpr int kWarp = 32;
constexpr int kInFlight = 16;

// *Late: launch_dependents after the wait (a kernel's pre-wait part then
// overlaps only its direct predecessor).
enum Mode { kPlain = 0, kPdl = 1, kPdlL2 = 2, kPdlReg = 3, kPdlL2Late = 4, kPdlRegLate = 5 };
__host__ __device__ constexpr bool early_trigger(int mode) {
  return mode == kPdl || mode == kPdlL2 || mode == kPdlReg;
}
__host__ __device__ constexpr bool l2_first(int mode) {
  return mode == kPdlL2 || mode == kPdlL2Late;
}
__host__ __device__ constexpr bool reg_first(int mode) {
  return mode == kPdlReg || mode == kPdlRegLate;
}

__device__ __forceinline__ void unpack(const uint4& v, float (&out)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// C[n] (+)= sum_k A[k] W[n, k]; SPLIT warps per column, each a contiguous 1/SPLIT of K.
template <int MODE, int SPLIT>
__global__ void __launch_bounds__(128)
    gemv(const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* c, int64_t n, int64_t k,
         int accumulate) {
  __shared__ float partial[4];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * (4 / SPLIT) + warp / SPLIT;
  const int part = warp % SPLIT;
  const int64_t vectors = k / 8 / SPLIT;
  const bool has_column = column < n;
  const uint4* row =
      reinterpret_cast<const uint4*>(w + (has_column ? column : 0) * k) + part * vectors;
  const uint4* x = reinterpret_cast<const uint4*>(a) + part * vectors;
  if (early_trigger(MODE)) launch_dependents();
  uint4 loaded[kInFlight];
  int64_t index = lane;
  if (l2_first(MODE) && has_column) {
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      if (index + j * kWarp < vectors) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + index + j * kWarp));
      }
    }
  }
  if (reg_first(MODE) && has_column) {
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      if (index + j * kWarp < vectors) loaded[j] = __ldg(row + index + j * kWarp);
    }
  }
  if (MODE != kPlain) grid_wait();
  if (MODE != kPlain && !early_trigger(MODE)) launch_dependents();
  if (!has_column) return;
  float acc = 0.0f;
  bool first = true;
  for (; index < vectors; index += kInFlight * kWarp) {
    if (!(reg_first(MODE) && first)) {
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        if (index + j * kWarp < vectors) loaded[j] = __ldg(row + index + j * kWarp);
      }
    }
    first = false;
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      if (index + j * kWarp < vectors) {
        float ws[8], xs[8];
        unpack(loaded[j], ws);
        unpack(__ldg(x + index + j * kWarp), xs);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc = fmaf(xs[i], ws[i], acc);
      }
    }
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  if (SPLIT > 1) {
    if (lane == 0) partial[warp] = acc;
    __syncwarp();
  }
  if (SPLIT == 1 && lane == 0) {
    __nv_bfloat16* out = c + column;
    *out = __float2bfloat16_rn(accumulate ? acc + __bfloat162float(*out) : acc);
  }
  if (SPLIT > 1) {
    // Not bitwise equal to SPLIT 1 (another order); checked within rounding.
    asm volatile("bar.sync 1, 128;");
    if (part == 0 && lane == 0) {
      float total = 0.0f;
      for (int p = 0; p < SPLIT; ++p) total += partial[warp + p];
      __nv_bfloat16* out = c + column;
      *out = __float2bfloat16_rn(accumulate ? total + __bfloat162float(*out) : total);
    }
  }
}

// Stand-in for the decode attention kernel: 8 blocks of 256 threads that read
// 32 KiB of "cache" each and write the q part of qkv.
template <int MODE>
__global__ void __launch_bounds__(256) attention_standin(__nv_bfloat16* qkv, const float* cache) {
  if (early_trigger(MODE)) launch_dependents();
  if (MODE != kPlain) grid_wait();
  if (MODE != kPlain && !early_trigger(MODE)) launch_dependents();
  float sum = 0.0f;
  const float* mine = cache + blockIdx.x * 8192;
  for (int i = threadIdx.x; i < 8192; i += 256) sum += mine[i];
  __shared__ float total[256];
  total[threadIdx.x] = sum;
  __syncthreads();
  const int base = blockIdx.x * 256;
  float q = __bfloat162float(qkv[base + threadIdx.x]);
  qkv[base + threadIdx.x] = __float2bfloat16_rn(q * 0.5f + total[(threadIdx.x + 1) % 256] * 1e-6f);
}

// Note [Streamed GEMV] candidate: a grid of one block per SM, each warp
// taking rows r, r + warps, ...; every thread streams its own weight vectors
// (the same lane order as gemv: lane, lane + 32, ... of each row) through a
// ring of SLOTS 16-byte shared-memory slots filled by cp.async, SLOTS ahead
// of the fold. The first SLOTS vectors are requested before the PDL wait, so
// a kernel's blocks, resident beside the previous kernel's (each takes under
// half an SM), fetch its first 13 MB (at 24 slots) while that one runs. Each
// thread reads only slots it filled itself: no barrier. Same sums, same order
// as gemv<MODE, 1>: bitwise equal.
__device__ __forceinline__ void cp_async16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int SLOTS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    gemv_stream(const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* c, int64_t n,
                int64_t k, int accumulate) {
  extern __shared__ uint4 ring[];  // [SLOTS][THREADS]
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (THREADS / kWarp);
  const int64_t first_row =
      static_cast<int64_t>(blockIdx.x) * (THREADS / kWarp) + threadIdx.x / kWarp;
  const int64_t vectors = k / 8;
  const int64_t per_lane = lane < vectors ? (vectors - lane + kWarp - 1) / kWarp : 0;
  const uint4* weights = reinterpret_cast<const uint4*>(w);
  const uint4* x = reinterpret_cast<const uint4*>(a);
  uint4* mine = ring + threadIdx.x;
  int64_t issue_row = per_lane > 0 ? first_row : n;
  int64_t issue_j = 0;
  auto issue = [&](int slot) {
    if (issue_row < n) {
      cp_async16(mine + slot * THREADS, weights + issue_row * vectors + lane + issue_j * kWarp);
      if (++issue_j == per_lane) {
        issue_j = 0;
        issue_row += warps;
      }
    }
    cp_async_commit();  // empty at the end: SLOTS groups stay pending
  };
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) issue(s);
  grid_wait();
  launch_dependents();
  int slot = 0;
  for (int64_t row = first_row; row < n; row += warps) {
    float acc = 0.0f;
    for (int64_t j = 0; j < per_lane; ++j) {
      cp_async_wait<SLOTS - 1>();
      const uint4 wv = mine[slot * THREADS];
      float ws[8], xs[8];
      unpack(wv, ws);
      unpack(__ldg(x + lane + j * kWarp), xs);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(xs[i], ws[i], acc);
      issue(slot);  // after the fold used wv: the slot is free
      slot = slot + 1 == SLOTS ? 0 : slot + 1;
    }
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    }
    if (lane == 0) {
      __nv_bfloat16* out = c + row;
      *out = __float2bfloat16_rn(accumulate ? acc + __bfloat162float(*out) : acc);
    }
  }
  cp_async_wait<0>();
}

__global__ void count_down(cudaGraphConditionalHandle handle, int* left) {
  int v = --*left;
  cudaGraphSetConditional(handle, v > 0 ? 1u : 0u);
}

__global__ void fill(__nv_bfloat16* p, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16_rn(((h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
  }
}

struct Shapes {
  static constexpr int64_t hidden = 2048, qkv = 3072, inter = 8192, vocab = 32000, layers = 16;
};

int g_sms = 132;
// Streamed variants: MODE kStream16 (16 slots, 256 threads), kStream24, kStream32x128.
constexpr int kStream16 = 100, kStream24 = 101, kStream32 = 102, kStream24x128 = 103;
template <int SLOTS, int THREADS>
void launch_stream(cudaStream_t s, const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* c,
                   int64_t n, int64_t k, int accumulate, int blocks_per_sm) {
  const int bytes = SLOTS * THREADS * 16;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(g_sms * blocks_per_sm));
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = bytes;
  config.stream = s;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, gemv_stream<SLOTS, THREADS>, a, w, c, n, k, accumulate));
}

// Before any capture: the streamed kernels' shared memory above 48 KiB.
template <int SLOTS, int THREADS>
void allow_shared() {
  CHECK(cudaFuncSetAttribute(gemv_stream<SLOTS, THREADS>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, SLOTS * THREADS * 16));
}

template <int MODE, int SPLIT>
void launch_gemv(cudaStream_t s, const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* c,
                 int64_t n, int64_t k, int accumulate) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((n * SPLIT + 3) / 4));
  config.blockDim = dim3(128);
  config.stream = s;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = MODE != kPlain ? 1 : 0;
  if constexpr (MODE == kStream16) {
    launch_stream<16, 256>(s, a, w, c, n, k, accumulate, 1);
  } else if constexpr (MODE == kStream24) {
    launch_stream<24, 256>(s, a, w, c, n, k, accumulate, 1);
  } else if constexpr (MODE == kStream24x128) {
    launch_stream<24, 128>(s, a, w, c, n, k, accumulate, 2);
  } else if constexpr (MODE == kStream32) {
    launch_stream<32, 128>(s, a, w, c, n, k, accumulate, 2);
  } else {
    CHECK(cudaLaunchKernelEx(&config, gemv<MODE, SPLIT>, a, w, c, n, k, accumulate));
  }
}

template <int MODE>
void launch_attention(cudaStream_t s, __nv_bfloat16* qkv, const float* cache) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(8);
  config.blockDim = dim3(256);
  config.stream = s;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = MODE != kPlain ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, attention_standin<MODE>, qkv, cache));
}

struct Model {
  std::vector<__nv_bfloat16*> qkv, o, gate_up, down;
  __nv_bfloat16* lm = nullptr;
  __nv_bfloat16 *x = nullptr, *qkv_out = nullptr, *mlp = nullptr, *logits = nullptr;
  float* cache = nullptr;
};

// One decode step's GEMVs (gate/up as one N = 2 * inter GEMV whose first half
// feeds down: the fused kernel's bytes without its SwiGLU).
template <int MODE, int SPLIT_NARROW>
void step(cudaStream_t s, Model& m, bool with_attention) {
  using S = Shapes;
  for (int l = 0; l < S::layers; ++l) {
    launch_gemv<MODE, 1>(s, m.x, m.qkv[l], m.qkv_out, S::qkv, S::hidden, 0);
    if (with_attention) launch_attention<MODE>(s, m.qkv_out, m.cache);
    launch_gemv<MODE, SPLIT_NARROW>(s, m.qkv_out, m.o[l], m.x, S::hidden, S::hidden, 1);
    launch_gemv<MODE, 1>(s, m.x, m.gate_up[l], m.mlp, 2 * S::inter, S::hidden, 0);
    launch_gemv<MODE, SPLIT_NARROW>(s, m.mlp, m.down[l], m.x, S::hidden, S::inter, 1);
  }
  launch_gemv<MODE, 1>(s, m.x, m.lm, m.logits, S::vocab, S::hidden, 0);
}

float time_graph(cudaGraphExec_t exec, cudaStream_t s, int reps) {
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s));
  std::vector<float> times;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(start, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(end, s));
    CHECK(cudaEventSynchronize(end));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    times.push_back(ms * 1000.0f);
  }
  std::sort(times.begin(), times.end());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  return times[times.size() / 2];
}

template <typename Body>
cudaGraph_t capture(cudaStream_t s, Body body) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  body();
  CHECK(cudaStreamEndCapture(s, &graph));
  return graph;
}

size_t programmatic_edges(cudaGraph_t g) {
  size_t count = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &count));
  size_t p = 0;
  for (auto& d : data) p += d.type != cudaGraphDependencyTypeDefault;
  return p;
}

// Times `steps` steps as one WHILE launch whose body is the captured step.
template <int MODE, int SPLIT_NARROW>
void while_probe(cudaStream_t s, Model& m, int steps, const char* name, float per_step_us) {
  cudaGraph_t body_captured = capture(s, [&] { step<MODE, SPLIT_NARROW>(s, m, true); });
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle handle;
  CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
  cudaGraph_t body = params.conditional.phGraph_out[0];
  cudaGraphNode_t child;
  cudaError_t status = cudaGraphAddChildGraphNode(&child, body, nullptr, 0, body_captured);
  std::printf("while %-9s body has %zu programmatic edges; child node: %s\n", name,
              programmatic_edges(body_captured), cudaGetErrorString(status));
  if (status != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  int* left;
  CHECK(cudaMalloc(&left, sizeof(int)));
  // The count-down kernel after the child (captured into the body after it).
  cudaGraphNode_t down_node;
  cudaKernelNodeParams kp{};
  void* args[] = {&handle, &left};
  kp.func = reinterpret_cast<void*>(count_down);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(&down_node, body, &child, 1, &kp));
  cudaGraphExec_t exec;
  status = cudaGraphInstantiate(&exec, graph, 0);
  std::printf("while %-9s instantiate: %s\n", name, cudaGetErrorString(status));
  if (status != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  std::vector<float> times;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaMemcpy(left, &steps, sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms * 1000.0f / steps);
  }
  std::sort(times.begin(), times.end());
  std::printf("while %-9s %8.1f us/step (per-step graph %8.1f)\n", name, times[2], per_step_us);
}

// The step captured straight into the WHILE body (no child graph node), and
// per-step graph launches with the host waiting for each step: per-iteration
// costs of the two loops.
template <int MODE, int SPLIT_NARROW>
void loop_costs(cudaStream_t s, Model& m, int steps, const char* name) {
  int* left;
  CHECK(cudaMalloc(&left, sizeof(int)));
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle handle;
  CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
  cudaGraph_t body = params.conditional.phGraph_out[0];
  cudaError_t status =
      cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal);
  if (status == cudaSuccess) {
    step<MODE, SPLIT_NARROW>(s, m, true);
    count_down<<<1, 1, 0, s>>>(handle, left);
    cudaGraph_t out;
    status = cudaStreamEndCapture(s, &out);
  }
  cudaGraphExec_t exec = nullptr;
  if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, graph, 0);
  std::printf("while-direct %-9s body %zu programmatic edges, capture+instantiate: %s\n", name,
              programmatic_edges(body), cudaGetErrorString(status));
  if (status == cudaSuccess) {
    std::vector<float> times;
    for (int r = 0; r < 5; ++r) {
      CHECK(cudaMemcpy(left, &steps, sizeof(int), cudaMemcpyHostToDevice));
      cudaEvent_t a, b;
      CHECK(cudaEventCreate(&a));
      CHECK(cudaEventCreate(&b));
      CHECK(cudaEventRecord(a, s));
      CHECK(cudaGraphLaunch(exec, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      times.push_back(ms * 1000.0f / steps);
    }
    std::sort(times.begin(), times.end());
    std::printf("while-direct %-9s %8.1f us/step\n", name, times[2]);
  } else {
    cudaGetLastError();
  }
  // Per-step graphs, the host waiting for each.
  cudaGraph_t g = capture(s, [&] { step<MODE, SPLIT_NARROW>(s, m, true); });
  cudaGraphExec_t one;
  CHECK(cudaGraphInstantiate(&one, g, 0));
  std::vector<float> times;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaStreamSynchronize(s));
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      CHECK(cudaGraphLaunch(one, s));
      CHECK(cudaStreamSynchronize(s));
    }
    auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<float, std::micro>(end - start).count() / steps);
  }
  std::sort(times.begin(), times.end());
  std::printf("host-synced per-step %-9s %8.1f us/step\n", name, times[2]);
}

template <int MODE, int SPLIT>
float time_one_shape(cudaStream_t s, Model& m, const char* label, int which, double* gbps) {
  using S = Shapes;
  // 16 launches of one shape over the 16 layers' weights in one graph.
  cudaGraph_t g = capture(s, [&] {
    for (int l = 0; l < S::layers; ++l) {
      if (which == 0) launch_gemv<MODE, SPLIT>(s, m.x, m.qkv[l], m.qkv_out, S::qkv, S::hidden, 0);
      if (which == 1) launch_gemv<MODE, SPLIT>(s, m.qkv_out, m.o[l], m.x, S::hidden, S::hidden, 1);
      if (which == 2)
        launch_gemv<MODE, SPLIT>(s, m.x, m.gate_up[l], m.mlp, 2 * S::inter, S::hidden, 0);
      if (which == 3) launch_gemv<MODE, SPLIT>(s, m.mlp, m.down[l], m.x, S::hidden, S::inter, 1);
      if (which == 4 && l < 4)
        launch_gemv<MODE, SPLIT>(s, m.x, m.lm, m.logits, S::vocab, S::hidden, 0);
    }
  });
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  const float us = time_graph(exec, s, 20) / (which == 4 ? 4 : S::layers);
  const double bytes[] = {S::qkv * S::hidden * 2.0, S::hidden * S::hidden * 2.0,
                          2 * S::inter * S::hidden * 2.0, S::hidden * S::inter * 2.0,
                          S::vocab * S::hidden * 2.0};
  *gbps = bytes[which] / (us * 1e-6) / 1e9;
  (void)label;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  return us;
}

template <int MODE, int SPLIT>
void shape_row(cudaStream_t s, Model& m, const char* name) {
  std::printf("%-9s", name);
  for (int which = 0; which < 5; ++which) {
    double gbps;
    float us = time_one_shape<MODE, SPLIT>(s, m, name, which, &gbps);
    std::printf("  %7.2f us %6.0f GB/s", us, gbps);
  }
  std::printf("\n");
}

template <int MODE, int SPLIT_NARROW>
float step_row(cudaStream_t s, Model& m, const char* name, std::vector<uint16_t>* logits) {
  cudaGraph_t g = capture(s, [&] { step<MODE, SPLIT_NARROW>(s, m, true); });
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  // Same inputs for each variant: reset x, then one step, read the logits.
  CHECK(cudaMemset(m.x, 0, 0));
  const float us = time_graph(exec, s, 20);
  const double bytes =
      Shapes::layers * (Shapes::qkv + Shapes::hidden + 3 * Shapes::inter) * Shapes::hidden * 2.0 +
      Shapes::vocab * Shapes::hidden * 2.0;
  std::printf("step %-9s %8.1f us  %5.1f%% of 3.35 TB/s  (%zu programmatic edges)\n", name, us,
              100.0 * bytes / (us * 1e-6) / 3.35e12, programmatic_edges(g));
  // Determinism / equality: fresh inputs, one replay, logits.
  fill<<<64, 256, 0, s>>>(m.x, Shapes::hidden, 7);
  fill<<<64, 256, 0, s>>>(m.qkv_out, Shapes::qkv, 8);
  fill<<<64, 256, 0, s>>>(m.mlp, 2 * Shapes::inter, 9);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  logits->resize(Shapes::vocab);
  CHECK(cudaMemcpy(logits->data(), m.logits, Shapes::vocab * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  return us;
}

int main() {
  using S = Shapes;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  g_sms = prop.multiProcessorCount;
  allow_shared<16, 256>();
  allow_shared<24, 256>();
  allow_shared<32, 128>();
  allow_shared<24, 128>();
  Model m;
  auto alloc = [](int64_t elements, uint32_t seed) {
    __nv_bfloat16* p;
    CHECK(cudaMalloc(&p, elements * 2));
    fill<<<1024, 256>>>(p, elements, seed);
    return p;
  };
  uint32_t seed = 1;
  for (int l = 0; l < S::layers; ++l) {
    m.qkv.push_back(alloc(S::qkv * S::hidden, seed++));
    m.o.push_back(alloc(S::hidden * S::hidden, seed++));
    m.gate_up.push_back(alloc(2 * S::inter * S::hidden, seed++));
    m.down.push_back(alloc(S::hidden * S::inter, seed++));
  }
  m.lm = alloc(S::vocab * S::hidden, seed++);
  m.x = alloc(S::hidden, seed++);
  m.qkv_out = alloc(S::qkv, seed++);
  m.mlp = alloc(2 * S::inter, seed++);
  m.logits = alloc(S::vocab, seed++);
  CHECK(cudaMalloc(&m.cache, 8 * 8192 * sizeof(float)));
  CHECK(cudaMemset(m.cache, 0, 8 * 8192 * sizeof(float)));
  CHECK(cudaDeviceSynchronize());
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  std::printf("per kernel (16 in one graph, each over another layer's weights):\n");
  std::printf("%-9s  %-22s  %-22s  %-22s  %-22s  %-22s\n", "variant", "qkv 3072x2048",
              "o 2048x2048", "gate/up 16384x2048", "down 2048x8192", "lm head 32000x2048");
  shape_row<kPlain, 1>(s, m, "plain");
  shape_row<kPdl, 1>(s, m, "pdl");
  shape_row<kPdlL2, 1>(s, m, "pdl_l2");
  shape_row<kPdlReg, 1>(s, m, "pdl_reg");
  shape_row<kPdlL2Late, 1>(s, m, "l2_late");
  shape_row<kPdlRegLate, 1>(s, m, "reg_late");
  shape_row<kPdlReg, 2>(s, m, "split2");
  shape_row<kPdlReg, 4>(s, m, "split4");
  shape_row<kStream16, 1>(s, m, "stream16");
  shape_row<kStream24, 1>(s, m, "stream24");
  shape_row<kStream32, 1>(s, m, "str32x128");
  shape_row<kStream24x128, 1>(s, m, "s24x128");

  std::vector<uint16_t> reference, got;
  const float plain = step_row<kPlain, 1>(s, m, "plain", &reference);
  auto check = [&](const char* name, bool bitwise) {
    size_t differ = 0;
    double worst = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      if (reference[i] != got[i]) ++differ;
      uint32_t a = uint32_t(reference[i]) << 16, b = uint32_t(got[i]) << 16;
      float fa, fb;
      std::memcpy(&fa, &a, 4);
      std::memcpy(&fb, &b, 4);
      worst = std::max(worst, (double)std::fabs(fa - fb));
    }
    std::printf("  %-9s logits %s plain's: %zu of %zu differ (max |diff| %.3g)%s\n", name,
                differ == 0 ? "equal to" : "differ from", differ, reference.size(), worst,
                bitwise && differ != 0 ? "  <-- expected bitwise equal" : "");
  };
  const float pdl = step_row<kPdl, 1>(s, m, "pdl", &got);
  check("pdl", true);
  const float l2 = step_row<kPdlL2, 1>(s, m, "pdl_l2", &got);
  check("pdl_l2", true);
  const float reg = step_row<kPdlReg, 1>(s, m, "pdl_reg", &got);
  check("pdl_reg", true);
  step_row<kPdlL2Late, 1>(s, m, "l2_late", &got);
  check("l2_late", true);
  step_row<kPdlRegLate, 1>(s, m, "reg_late", &got);
  check("reg_late", true);
  const float split = step_row<kPdlReg, 2>(s, m, "split2", &got);
  check("split2", false);
  const float split4 = step_row<kPdlReg, 4>(s, m, "split4", &got);
  check("split4", false);
  step_row<kStream16, 1>(s, m, "stream16", &got);
  check("stream16", true);
  step_row<kStream24, 1>(s, m, "stream24", &got);
  check("stream24", true);
  step_row<kStream32, 1>(s, m, "str32x128", &got);
  check("str32x128", true);
  step_row<kStream24x128, 1>(s, m, "s24x128", &got);
  check("s24x128", true);
  while_probe<kPlain, 1>(s, m, 32, "plain", plain);
  while_probe<kPdlReg, 1>(s, m, 32, "pdl_reg", reg);
  while_probe<kPdlL2Late, 1>(s, m, 32, "l2_late", l2);
  loop_costs<kPlain, 1>(s, m, 32, "plain");
  loop_costs<kPdlL2Late, 1>(s, m, 32, "l2_late");
  (void)pdl;
  (void)l2;
  (void)split;
  (void)split4;
  return 0;
}
