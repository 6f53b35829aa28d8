// The memory layout the decode kernels (decode_kernels.cu) and their host
// side (decode_kernels.cc, decode_loop.cc) agree on. Plain constants, no
// CUDA: included by both compilers.
#pragma once

#include <cstdint>

namespace grove::serving::llm::decode_layout {

#ifdef __CUDACC__
#define GROVE_LAYOUT_HOST_DEVICE __host__ __device__
#else
#define GROVE_LAYOUT_HOST_DEVICE
#endif

// Per row of a decode batch: int64 fields of the row-state tensor [rows, kRowFields].
inline constexpr int64_t kDraws = 0;            // tokens the request has generated
inline constexpr int64_t kRemaining = 1;        // tokens it may still generate
inline constexpr int64_t kSeed = 2;             // sampling seed (bits of a uint64)
inline constexpr int64_t kTopK = 3;             // 0: no cut
inline constexpr int64_t kTemperatureBits = 4;  // bits of a double; 0: greedy
inline constexpr int64_t kTopPBits = 5;         // bits of a double
inline constexpr int64_t kFinish = 6;           // kRunning, kFinishedEos, kFinishedLength
inline constexpr int64_t kEos = 7;              // its EOS tokens, kEosSlots fields, -1 unused
inline constexpr int64_t kEosSlots = 8;         // DecoderConfig's kMaxEosTokens
inline constexpr int64_t kRowFields = kEos + kEosSlots;

// Note [Every EOS token stops a row] (decoder_config.cc): the stop test.
GROVE_LAYOUT_HOST_DEVICE inline bool is_eos(const int64_t* row_state, int64_t token) {
  for (int64_t slot = 0; slot < kEosSlots; ++slot) {
    if (row_state[kEos + slot] == token) return true;
  }
  return false;
}

inline constexpr int64_t kRunning = 0;
inline constexpr int64_t kFinishedEos = 1;
inline constexpr int64_t kFinishedLength = 2;

// The loop-state tensor: int64 [kLoopFields].
inline constexpr int64_t kStep = 0;    // steps done in this launch (the stream's row index)
inline constexpr int64_t kBudget = 1;  // steps this launch may run
inline constexpr int64_t kLoopFields = 2;

// The published words in host-mapped memory, ahead of the streamed tokens.
inline constexpr int64_t kPublishedSteps = 0;    // steps whose tokens are readable
inline constexpr int64_t kPublishedStopped = 1;  // 1 once the last step of a launch is done
inline constexpr int64_t kPublishedWords = 2;

}  // namespace grove::serving::llm::decode_layout
