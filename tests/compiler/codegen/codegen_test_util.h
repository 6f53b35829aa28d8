// Helpers for codegen tests: host buffers of any dtype, running a KernelSpec
// on a device (through compile_kernel + launch) or as a raw host function, and
// seeded random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_compiler.h"
#include "compiler/codegen/kernel_spec.h"
#include "runtime/device.h"

namespace grove::testing {

// Element values held as doubles, stored on the device as `dtype`.
struct Buffer {
  runtime::DType dtype = runtime::DType::kF32;
  std::vector<double> values;
};

// The number of elements a buffer with `strides` over `shape` spans.
int64_t span(const runtime::Shape& shape, const runtime::Shape& strides);
// `value` as it reads back after a store to `dtype` (rounding, truncation).
double representable(double value, runtime::DType dtype);

// Uniform values in [low, high), rounded to what `dtype` can hold.
Buffer random_buffer(std::mt19937& rng, runtime::DType dtype, int64_t count, double low,
                     double high);

// Runs `spec` on `device` and returns its outputs, each sized span(output).
std::vector<Buffer> run_kernel(const compiler::codegen::KernelSpec& spec, runtime::Device device,
                               const std::vector<Buffer>& inputs,
                               const std::vector<float>& scalars = {});
// Runs a host function directly on host memory (no device).
std::vector<Buffer> run_host_function(runtime::HostKernelFn function,
                                      const compiler::codegen::KernelSpec& spec,
                                      const std::vector<Buffer>& inputs,
                                      const std::vector<float>& scalars = {});

// |actual - expected| <= atol + rtol |expected|, NaNs equal, infinities exact.
bool close(double actual, double expected, double rtol, double atol);

}  // namespace grove::testing
