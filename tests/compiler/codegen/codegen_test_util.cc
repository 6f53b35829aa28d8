#include "tests/compiler/codegen/codegen_test_util.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace grove::testing {
namespace {

using compiler::codegen::KernelSpec;
using runtime::DType;

std::vector<uint8_t> encode(const Buffer& buffer) {
  const size_t size = runtime::dtype_size(buffer.dtype);
  std::vector<uint8_t> bytes(buffer.values.size() * size);
  for (size_t i = 0; i < buffer.values.size(); ++i) {
    runtime::store_element(bytes.data() + i * size, buffer.dtype, buffer.values[i]);
  }
  return bytes;
}

Buffer decode(DType dtype, const uint8_t* bytes, int64_t count) {
  Buffer buffer{dtype, std::vector<double>(count)};
  const size_t size = runtime::dtype_size(dtype);
  for (int64_t i = 0; i < count; ++i)
    buffer.values[i] = runtime::load_element(bytes + i * size, dtype);
  return buffer;
}

runtime::Shape output_shape(const KernelSpec& spec, size_t output) {
  runtime::Shape shape = spec.iteration_shape;
  if (spec.outputs[output].per_row) shape.pop_back();
  return shape;
}

}  // namespace

int64_t span(const runtime::Shape& shape, const runtime::Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

double representable(double value, DType dtype) {
  Buffer buffer{dtype, {value}};
  std::vector<uint8_t> bytes = encode(buffer);
  return decode(dtype, bytes.data(), 1).values[0];
}

Buffer random_buffer(std::mt19937& rng, DType dtype, int64_t count, double low, double high) {
  std::uniform_real_distribution<double> uniform(low, high);
  Buffer buffer{dtype, std::vector<double>(count)};
  for (double& v : buffer.values) {
    v = uniform(rng);
    if (dtype == DType::kI32 || dtype == DType::kI64) v = std::floor(v);
    if (dtype == DType::kBool) v = v > (low + high) / 2 ? 1 : 0;
    v = representable(v, dtype);
  }
  return buffer;
}

std::vector<Buffer> run_kernel(const KernelSpec& spec, runtime::Device device,
                               const std::vector<Buffer>& inputs,
                               const std::vector<float>& scalars) {
  compiler::codegen::CompiledKernel kernel = compiler::codegen::compile_kernel(spec, device);
  std::vector<runtime::Tensor> input_tensors;
  for (const Buffer& input : inputs) {
    std::vector<uint8_t> bytes = encode(input);
    input_tensors.push_back(runtime::Tensor::from_host(
        bytes.data(), {static_cast<int64_t>(input.values.size())}, input.dtype, device));
  }
  std::vector<runtime::Tensor> output_tensors;
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const int64_t count =
        std::max<int64_t>(1, span(output_shape(spec, o), spec.outputs[o].strides));
    output_tensors.push_back(runtime::Tensor::empty({count}, spec.outputs[o].dtype, device));
  }
  compiler::codegen::launch(kernel, input_tensors, output_tensors, scalars);
  std::vector<Buffer> outputs;
  for (const runtime::Tensor& tensor : output_tensors) {
    std::vector<uint8_t> bytes = tensor.to_host_bytes();
    outputs.push_back(decode(tensor.dtype(), bytes.data(), tensor.numel()));
  }
  return outputs;
}

std::vector<Buffer> run_host_function(runtime::HostKernelFn function, const KernelSpec& spec,
                                      const std::vector<Buffer>& inputs,
                                      const std::vector<float>& scalars) {
  // A host kernel reads what its spec says, whatever the buffers hold.
  if (inputs.size() != spec.inputs.size()) {
    throw std::logic_error(spec.name + ": " + std::to_string(inputs.size()) + " inputs for " +
                           std::to_string(spec.inputs.size()) + " buffers");
  }
  for (size_t i = 0; i < inputs.size() && i < spec.inputs.size(); ++i) {
    if (spec.inputs[i].strides.size() != spec.iteration_shape.size()) continue;
    const int64_t reach = span(spec.iteration_shape, spec.inputs[i].strides);
    if (static_cast<int64_t>(inputs[i].values.size()) < reach) {
      throw std::logic_error(spec.name + ": input " + std::to_string(i) + " has " +
                             std::to_string(inputs[i].values.size()) +
                             " values; the kernel reads " + std::to_string(reach));
    }
  }
  std::vector<std::vector<uint8_t>> input_bytes;
  for (const Buffer& input : inputs) input_bytes.push_back(encode(input));
  std::vector<std::vector<uint8_t>> output_bytes;
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const int64_t count =
        std::max<int64_t>(1, span(output_shape(spec, o), spec.outputs[o].strides));
    output_bytes.emplace_back(count * runtime::dtype_size(spec.outputs[o].dtype), 0);
  }
  runtime::KernelArgs args;
  for (auto& bytes : input_bytes) args.add_pointer(bytes.data());
  for (auto& bytes : output_bytes) args.add_pointer(bytes.data());
  for (float scalar : scalars) args.add_f32(scalar);
  runtime::LaunchDims dims;
  function(&dims, args.slots.data());
  std::vector<Buffer> outputs;
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const DType dtype = spec.outputs[o].dtype;
    outputs.push_back(
        decode(dtype, output_bytes[o].data(),
               static_cast<int64_t>(output_bytes[o].size() / runtime::dtype_size(dtype))));
  }
  return outputs;
}

bool close(double actual, double expected, double rtol, double atol) {
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  return std::fabs(actual - expected) <= atol + rtol * std::fabs(expected);
}

}  // namespace grove::testing
