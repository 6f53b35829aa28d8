// Device kernels of the decode step (decode_kernels.h): the KV-cache write at
// one position per row, token sampling (Note [Sampling draws], sampler.h) and
// the loop control of DecodeLoop. Compiled to PTX by regenerate_ptx.sh with
// --fmad=false, so the sampling arithmetic matches the host reference.
#include <cstdint>

#include "compiler/ops/philox.h"
#include "runtime/programmatic_launch_device.h"
#include "serving/llm/decode_kernels_layout.h"
#include "serving/llm/sampling_math.h"

namespace sampling = grove::serving::llm::sampling;
namespace layout = grove::serving::llm::decode_layout;

// table[0, tensors): cache base pointers; table[tensors, 2 * tensors): the new
// rows [rows, kv_heads, row_bytes]. Block (row, tensor) copies row `row` of
// every head to position positions[row] of slot `row` (nothing for -1).
extern "C" __global__ void grove_llm_kv_write(const int64_t* table, int64_t tensors,
                                              const int64_t* positions, int64_t kv_heads,
                                              int64_t max_seq_len, int64_t row_bytes) {
  wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
  allow_next_kernel();
  const int64_t row = blockIdx.x;
  const int64_t tensor = blockIdx.y;
  const int64_t position = positions[row];
  if (position < 0) return;
  auto* cache = reinterpret_cast<uint16_t*>(table[tensor]);
  const auto* source = reinterpret_cast<const uint16_t*>(table[tensors + tensor]);
  const int64_t units = row_bytes / 2;
  for (int64_t i = threadIdx.x; i < kv_heads * units; i += blockDim.x) {
    const int64_t head = i / units;
    const int64_t unit = i % units;
    cache[((row * kv_heads + head) * max_seq_len + position) * units + unit] =
        source[(row * kv_heads + head) * units + unit];
  }
}

// Note [Prefill cache writes] (decode_kernels.h): table as for
// grove_llm_kv_write, the new rows [rows, kv_heads, row_bytes] of a prefill
// or chunk. Block (tensor, head) writes rows 0..count-1 at positions start..
// start+count-1 of slot `slot` and zeros at the positions after them.
extern "C" __global__ void grove_llm_kv_write_span(const int64_t* table, int64_t tensors,
                                                   int64_t slot, int64_t start, int64_t count,
                                                   int64_t kv_heads, int64_t max_seq_len,
                                                   int64_t row_bytes) {
  wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
  allow_next_kernel();
  const int64_t tensor = blockIdx.x;
  const int64_t head = blockIdx.y;
  auto* cache = reinterpret_cast<uint16_t*>(table[tensor]);
  const auto* source = reinterpret_cast<const uint16_t*>(table[tensors + tensor]);
  const int64_t units = row_bytes / 2;
  const int64_t base = (slot * kv_heads + head) * max_seq_len;
  for (int64_t i = threadIdx.x; i < (max_seq_len - start) * units; i += blockDim.x) {
    const int64_t offset = i / units;  // position start + offset
    const int64_t unit = i % units;
    cache[(base + start + offset) * units + unit] =
        offset < count ? source[(offset * kv_heads + head) * units + unit] : uint16_t{0};
  }
}

namespace {

// Thread 0 sums the threads' values in thread order; every thread gets the sum.
__device__ double ordered_sum(double mine, double* shared) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int t = 0; t < sampling::kThreads; ++t) sum = sum + shared[t];
    shared[sampling::kThreads] = sum;
  }
  __syncthreads();
  const double sum = shared[sampling::kThreads];
  __syncthreads();
  return sum;
}

// Every thread gets the sum of the threads' counts: integers, so a warp
// shuffle tree gives the ordered sum's value.
__device__ int64_t count_sum(int64_t mine, int64_t* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    mine +=
        static_cast<int64_t>(__shfl_down_sync(0xffffffffu, static_cast<long long>(mine), offset));
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = mine;
  __syncthreads();
  int64_t sum = 0;
  for (int warp = 0; warp < sampling::kThreads / 32; ++warp) sum += shared[warp];
  __syncthreads();
  return sum;
}

__device__ double as_double(int64_t bits) {
  double value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

// Blocks (part, row) of sampling::kThreads threads (decode_kernels.h). With
// one part a row, its block does everything; with several (Note [Greedy token
// over several blocks]), each finds the first largest logit of its share of
// the row, and the row's last block to finish takes the first largest of
// theirs, in part order, and goes on alone. `partials`: per row, parts
// (value bits, index) pairs, then the rows' arrival counters (zero between steps).
extern "C" __global__ void grove_llm_sample(const float* logits, int64_t vocab, int64_t* ids,
                                            int64_t* positions, int64_t* row_state,
                                            int64_t max_seq_len, int64_t* streamed,
                                            const int64_t* loop_state, int64_t* partials) {
  wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
  allow_next_kernel();
  __shared__ double masses[sampling::kThreads + 1];
  __shared__ int64_t counts[sampling::kThreads + 1];
  __shared__ float maxima[sampling::kThreads / 32];
  __shared__ int64_t best_index[sampling::kThreads / 32];
  __shared__ int64_t chosen;
  __shared__ bool last_part;
  const int64_t row = blockIdx.y;
  const int64_t rows = gridDim.y;
  const int64_t part = blockIdx.x;
  const int64_t parts = gridDim.x;
  const int t = threadIdx.x;
  const int64_t step = loop_state[layout::kStep];
  // Note [Steps per WHILE iteration]: a copy of the step after the launch stopped does nothing.
  if (step >= loop_state[layout::kBudget]) return;
  int64_t* state = row_state + row * layout::kRowFields;
  if (positions[row] < 0) {
    if (t == 0 && part == 0) streamed[step * rows + row] = -1;
    return;
  }
  const float* row_logits = logits + row * vocab;
  const int64_t begin = sampling::chunk_begin(t, vocab);
  const int64_t end = sampling::chunk_end(t, vocab);
  // Note [Greedy token on the device] (decode_kernels.h): coalesced reads,
  // (value, index) pairs reduced by warp shuffles, then across warps.
  float best_value = 0.0f;
  int64_t best = -1;
  auto consider = [&](float value, int64_t index) {
    if (best < 0 || value > best_value) {
      best_value = value;
      best = index;
    }
  };
  // This part's share of the row: a contiguous range of vectors (or of elements).
  auto share = [&](int64_t count, int64_t& first, int64_t& last) {
    const int64_t each = (count + parts - 1) / parts;
    first = part * each < count ? part * each : count;
    last = first + each < count ? first + each : count;
  };
  if (vocab % 4 == 0 && (reinterpret_cast<uintptr_t>(row_logits) & 15) == 0) {
    // 16-byte loads, several in flight: thread t reads vectors t, t + kThreads,
    // ..., each in index order, so it still keeps its first largest logit.
    const float4* vectors = reinterpret_cast<const float4*>(row_logits);
    int64_t first = 0, count = 0;
    share(vocab / 4, first, count);
#pragma unroll 4
    for (int64_t i = first + t; i < count; i += sampling::kThreads) {
      const float4 four = vectors[i];
      consider(four.x, 4 * i);
      consider(four.y, 4 * i + 1);
      consider(four.z, 4 * i + 2);
      consider(four.w, 4 * i + 3);
    }
  } else {
    int64_t first = 0, last = 0;
    share(vocab, first, last);
    for (int64_t i = first + t; i < last; i += sampling::kThreads) consider(row_logits[i], i);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_down_sync(0xffffffffu, best_value, offset);
    const long long other = __shfl_down_sync(0xffffffffu, static_cast<long long>(best), offset);
    if (other >= 0 &&
        (best < 0 || other_value > best_value || (other_value == best_value && other < best))) {
      best_value = other_value;
      best = other;
    }
  }
  constexpr int kWarps = sampling::kThreads / 32;
  if (t % 32 == 0) {
    best_index[t / 32] = best;
    maxima[t / 32] = best_value;
  }
  __syncthreads();
  if (t == 0) {
    int64_t overall = best_index[0];
    float overall_value = maxima[0];
    for (int warp = 1; warp < kWarps; ++warp) {
      const int64_t other = best_index[warp];
      if (other >= 0 && (overall < 0 || maxima[warp] > overall_value ||
                         (maxima[warp] == overall_value && other < overall))) {
        overall = other;
        overall_value = maxima[warp];
      }
    }
    chosen = overall;
    // Note [Greedy token over several blocks]: publish this part's pair; the
    // row's last part to arrive reduces them in part order.
    last_part = true;
    if (parts > 1) {
      int64_t* pair = partials + (row * parts + part) * 2;
      pair[0] = static_cast<int64_t>(__float_as_uint(overall_value));
      pair[1] = overall;
      __threadfence();
      auto* arrived = reinterpret_cast<unsigned long long*>(partials + rows * parts * 2 + row);
      last_part = atomicAdd(arrived, 1ull) == static_cast<unsigned long long>(parts - 1);
      if (last_part) {
        __threadfence();
        const volatile int64_t* pairs = partials + row * parts * 2;
        int64_t best_of_parts = -1;
        float best_part_value = 0.0f;
        for (int64_t other = 0; other < parts; ++other) {
          const int64_t index = pairs[2 * other + 1];
          const float value = __uint_as_float(static_cast<uint32_t>(pairs[2 * other]));
          if (index >= 0 && (best_of_parts < 0 || value > best_part_value ||
                             (value == best_part_value && index < best_of_parts))) {
            best_of_parts = index;
            best_part_value = value;
          }
        }
        chosen = best_of_parts;
        *arrived = 0;  // for the next step
      }
    }
  }
  __syncthreads();
  if (!last_part) return;
  const double temperature = as_double(state[layout::kTemperatureBits]);
  if (temperature > 0) {
    const float max_logit = row_logits[chosen];
    const int64_t top_k = state[layout::kTopK];
    const double top_p = as_double(state[layout::kTopPBits]);
    uint32_t threshold = 0;
    if (top_k > 0 && top_k < vocab) {
      for (int bit = 31; bit >= 0; --bit) {
        const uint32_t candidate = threshold | (1u << bit);
        if (count_sum(sampling::chunk_count(row_logits, begin, end, candidate), counts) >= top_k) {
          threshold = candidate;
        }
      }
    }
    if (top_p < 1) {
      const double target =
          top_p * ordered_sum(sampling::chunk_mass(row_logits, begin, end, threshold, max_logit,
                                                   temperature),
                              masses);
      uint32_t cut = 0;
      for (int bit = 31; bit >= 0; --bit) {
        const uint32_t candidate = cut | (1u << bit);
        const uint32_t effective = candidate > threshold ? candidate : threshold;
        const double mass = ordered_sum(
            sampling::chunk_mass(row_logits, begin, end, effective, max_logit, temperature),
            masses);
        if (mass >= target) cut = candidate;
      }
      threshold = cut > threshold ? cut : threshold;
    }
    masses[t] = sampling::chunk_mass(row_logits, begin, end, threshold, max_logit, temperature);
    __syncthreads();
    if (t == 0) {
      double total = 0;
      for (int other = 0; other < sampling::kThreads; ++other) total = total + masses[other];
      const uint64_t seed = static_cast<uint64_t>(state[layout::kSeed]);
      const uint64_t draw = static_cast<uint64_t>(state[layout::kDraws]);
      const double u =
          static_cast<double>(grove::compiler::ops::philox_uniform(seed, draw)) * total;
      double before = 0;
      int picked = -1;
      double picked_before = 0;
      for (int other = 0; other < sampling::kThreads; ++other) {
        const double mass = masses[other];
        if (mass <= 0) continue;
        picked = other;
        picked_before = before;
        before = before + mass;
        if (u < before) break;
      }
      chosen = sampling::chunk_pick(row_logits, sampling::chunk_begin(picked, vocab),
                                    sampling::chunk_end(picked, vocab), threshold, max_logit,
                                    temperature, picked_before, u);
    }
    __syncthreads();
  }
  if (t != 0) return;
  const int64_t token = chosen;
  ids[row] = token;
  state[layout::kDraws] += 1;
  const int64_t remaining = state[layout::kRemaining] - 1;
  state[layout::kRemaining] = remaining;
  const int64_t next = positions[row] + 1;
  int64_t finish = layout::kRunning;
  if (layout::is_eos(state, token)) {
    finish = layout::kFinishedEos;
  } else if (remaining <= 0 || next >= max_seq_len) {
    finish = layout::kFinishedLength;
  }
  state[layout::kFinish] = finish;
  positions[row] = finish == layout::kRunning ? next : -1;
  *reinterpret_cast<volatile int64_t*>(streamed + step * rows + row) = token;
  __threadfence_system();
}

// One thread: the step is done; decide whether another step runs (a row is
// still running and the launch's budget allows) and publish both to the host.
extern "C" __global__ void grove_llm_loop_control(const int64_t* positions, int64_t rows,
                                                  int64_t* loop_state, int32_t* keep_going,
                                                  int64_t* published) {
  wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
  allow_next_kernel();
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  // Note [Steps per WHILE iteration]: once stopped, the launch's budget is the
  // steps it ran, and the rest of the body's copies of the step do nothing.
  if (loop_state[layout::kStep] >= loop_state[layout::kBudget]) return;
  const int64_t step = loop_state[layout::kStep] + 1;
  loop_state[layout::kStep] = step;
  bool running = false;
  for (int64_t row = 0; row < rows; ++row) running = running || positions[row] >= 0;
  const int32_t again = running && step < loop_state[layout::kBudget] ? 1 : 0;
  if (!again) loop_state[layout::kBudget] = step;
  *keep_going = again;
  auto* host = reinterpret_cast<volatile int64_t*>(published);
  host[layout::kPublishedStopped] = again ? 0 : 1;
  __threadfence_system();
  host[layout::kPublishedSteps] = step;
  __threadfence_system();
}
