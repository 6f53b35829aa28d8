// Small kernels for runtime and tree tests, on every device: a host function
// for sim/cpu and PTX (from test_kernels.cu) for cuda, with identical argument
// slots. Launch helpers enqueue them on the device's current stream.
#pragma once

#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::testing {

enum class TestKernel { kFill, kAdd, kScale, kAddScalarInPlace };

// The kernel loaded on `device` (loaded once per device and cached).
runtime::KernelHandle test_kernel(runtime::Device device, TestKernel which);
runtime::LaunchDims launch_dims_for(int64_t n);

// out[i] = value
void launch_fill(const runtime::Tensor& out, float value);
// out[i] = a[i] + b[i]
void launch_add(const runtime::Tensor& a, const runtime::Tensor& b, const runtime::Tensor& out);
// out[i] = in[i] * factor
void launch_scale(const runtime::Tensor& in, const runtime::Tensor& out, float factor);
// x[i] += value
void launch_add_scalar_in_place(const runtime::Tensor& x, float value);

// Functional forms: allocate the output (contiguous, f32) on the current stream.
runtime::Tensor add(const runtime::Tensor& a, const runtime::Tensor& b);
runtime::Tensor scale(const runtime::Tensor& in, float factor);

}  // namespace grove::testing
