// PhiloxGenerator is a device's implicit random generator, like ATen's
// default CUDA generator: a seed and a counter offset kept on the host. A
// program that draws from it (compiler/ir/generator_state.h, Note [Implicit
// generator]) reserves its draws before each call and has the generator's
// state stored into its own device scalars by a kernel in stream order, so a
// recorded graph reads fresh state at every replay.
//
//   runtime::default_generator(device).manual_seed(1234);  // repeatable draws
#pragma once

#include <cstdint>
#include <mutex>

#include "runtime/tensor.h"

namespace grove::runtime {

class PhiloxGenerator {
 public:
  struct Draw {
    uint64_t seed = 0;
    uint64_t offset = 0;  // the first Philox counter of the draw
  };

  // Sets the seed and restarts the counter at 0: the draws that follow
  // repeat those made after an earlier manual_seed(seed).
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  // The generator's state, then advances the offset by `count` counters.
  // Throws Error when the offset would wrap past 2^63.
  Draw reserve(uint64_t count);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_ = 0x5eed;
  uint64_t offset_ = 0;
};

// One generator per device (thread-safe; lives as long as the process).
PhiloxGenerator& default_generator(Device device);

// Stores `draw` into two i64 scalars on their device (a kernel on the device's
// current stream: ordered before later work, and capturable). Throws
// DTypeError / ShapeError naming the tensor when one is not an i64 scalar.
void store_generator_state(const Tensor& seed, const Tensor& offset, PhiloxGenerator::Draw draw);

// The PTX the cuda device loads (for checks that assemble it).
const char* generator_state_ptx();

}  // namespace grove::runtime
