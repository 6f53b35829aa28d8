#include "tests/compiler/lowering/lowering_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace grove::testing {

using runtime::DType;

double round_to(double value, DType dtype) { return runtime::round_to_dtype(value, dtype); }

runtime::Tensor to_device(const HostTensor& host, runtime::Device device) {
  const size_t size = runtime::dtype_size(host.dtype);
  std::vector<uint8_t> bytes(host.data.size() * size);
  for (size_t i = 0; i < host.data.size(); ++i) {
    runtime::store_element(bytes.data() + i * size, host.dtype, host.data[i]);
  }
  return runtime::Tensor::from_host(bytes.data(), host.shape, host.dtype, device);
}

HostTensor to_host(const runtime::Tensor& tensor) {
  return HostTensor{tensor.shape(), tensor.dtype(), tensor.to_doubles()};
}

HostTensorList random_inputs(const compiler::ir::Program& program, uint32_t seed,
                             const InputRanges& ranges) {
  std::mt19937 rng(seed);
  HostTensorList inputs = compiler::reference::initial_state(program);
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const compiler::ir::Value& value = program.value(program.inputs()[i]);
    if (value.is_persistent()) continue;
    HostTensor& tensor = inputs[i];
    tensor.shape = value.type.shape;
    tensor.dtype = value.type.dtype;
    tensor.data.resize(static_cast<size_t>(runtime::shape_numel(value.type.shape)));
    std::uniform_real_distribution<double> real(ranges.float_low, ranges.float_high);
    std::uniform_int_distribution<int64_t> integer(ranges.int_low, ranges.int_high - 1);
    for (double& element : tensor.data) {
      if (runtime::is_floating(tensor.dtype)) {
        element = round_to(real(rng), tensor.dtype);
      } else if (tensor.dtype == DType::kBool) {
        element = static_cast<double>(rng() % 2);
      } else {
        element = static_cast<double>(integer(rng));
      }
    }
  }
  return inputs;
}

Tolerance tolerance_for(DType dtype) {
  if (dtype == DType::kBF16) return {2e-2, 2e-2};
  if (dtype == DType::kF16) return {2e-3, 2e-3};
  return {1e-4, 1e-5};
}

bool all_close(const HostTensor& actual, const HostTensor& expected, const Tolerance& tolerance,
               std::string* why) {
  if (actual.shape != expected.shape) {
    *why = str_cat("shape ", runtime::shape_str(actual.shape), " != expected ",
                   runtime::shape_str(expected.shape));
    return false;
  }
  for (size_t i = 0; i < actual.data.size(); ++i) {
    double a = actual.data[i];
    double e = round_to(expected.data[i], actual.dtype);
    if (std::isnan(a) && std::isnan(e)) continue;
    if (std::isinf(e) && a == e) continue;
    if (!(std::fabs(a - e) <= tolerance.atol + tolerance.rtol * std::fabs(e))) {
      *why = str_cat("element ", i, ": ", a, " vs expected ", expected.data[i]);
      return false;
    }
  }
  return true;
}

void expect_matches_reference(const compiler::ir::Program& program, const HostTensorList& inputs,
                              runtime::Device device, const Tolerance& tolerance,
                              const std::string& label,
                              const compiler::lowering::LowerOptions& lower_options) {
  HostTensorList reference_state = inputs;
  HostTensorList expected = compiler::reference::reference_run_in_place(
      program, reference_state, {[](const std::string&) {}});
  compiler::lowering::LowerOptions options = lower_options;
  options.print_sink = [](const std::string&) {};
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program, options);
  compiler::TensorList device_inputs;
  for (const HostTensor& input : inputs) device_inputs.push_back(to_device(input, device));
  compiler::TensorList outputs = lowered.function().call(device_inputs);
  ASSERT_EQ(outputs.size(), expected.size()) << label;
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::string why;
    EXPECT_TRUE(all_close(to_host(outputs[o]), expected[o], tolerance, &why))
        << label << ": output " << o << ": " << why << "\n"
        << lowered.describe();
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string why;
    EXPECT_TRUE(all_close(to_host(device_inputs[i]), reference_state[i], tolerance, &why))
        << label << ": input " << i << " after the call (in-place updates): " << why;
  }
}

}  // namespace grove::testing
