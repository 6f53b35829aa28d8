// The fuzzer's gradient check: a random program to differentiate
// (program_generator.h with GeneratorOptions::gradients: elementwise math,
// reductions, softmax, layer_norm, matmul/linear, views, concat, embedding and
// dropout drawing from the implicit generator) trained by a Trainer on
// "eager" or "cudagraphs" (by the seed's parity). At each step (warm-up,
// recording, replays), on fresh inputs:
//   - the forward advances the device's generator by exactly its draws and
//     the backward draws nothing (Note [Generator state is read once]);
//   - the loss matches the forward on the float64 reference interpreter, and
//     along random directions v over all params, the backward's sum(grad * v)
//     matches the reference forward's central difference in f64
//     (tests/common/gradient_oracle.h), both within kBound * max(1, scale),
//     scale = |loss| or sum(|grad * v|). A program whose reference loss
//     overflows is not checked further.
// The oracle is the forward's op semantics alone, so a gradient rule, a
// backward kernel or a mask that differs from the forward's cannot hide
// behind eager == cudagraphs.
//
//   DifferentialOutcome outcome = run_gradient_check(seed, runtime::kSimDevice, 3);
#pragma once

#include <cstdint>

#include "runtime/device.h"
#include "tests/fuzz/differential.h"

namespace grove::fuzz {

DifferentialOutcome run_gradient_check(uint64_t seed, runtime::Device device, int steps);

}  // namespace grove::fuzz
