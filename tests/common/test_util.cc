#include "tests/common/test_util.h"

#include <cstdlib>
#include <string_view>

#include "runtime/device_context.h"

namespace grove::testing {

std::vector<runtime::Device> test_devices() { return {runtime::kSimDevice, runtime::kCudaDevice}; }

std::string device_test_name(const ::testing::TestParamInfo<runtime::Device>& info) {
  return std::string(runtime::device_type_name(info.param.type)) + std::to_string(info.param.index);
}

void DeviceTest::SetUp() {
  if (GetParam().is_cuda() && runtime::cuda_device_count() <= GetParam().index) {
    GTEST_SKIP() << "no CUDA device";
  }
}

uint64_t test_seed() {
  if (const char* text = std::getenv("GROVE_TEST_SEED"); text != nullptr && *text != '\0') {
    return std::strtoull(text, nullptr, 10);
  }
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info == nullptr ? std::string("no test")
                                     : std::string(info->test_suite_name()) + "." + info->name();
  // FNV-1a: stable across runs and standard libraries, unlike std::hash.
  uint64_t hash = 1469598103934665603ull;
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash % 1000000007ull;
}

std::vector<float> random_floats(std::mt19937& rng, size_t count, float low, float high) {
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& value : values) {
    do {
      value = distribution(rng);
    } while (value == 0.0f);
  }
  return values;
}

std::vector<int64_t> random_ints(std::mt19937& rng, size_t count, int64_t low, int64_t high) {
  std::uniform_int_distribution<int64_t> distribution(low, high);
  std::vector<int64_t> values(count);
  for (int64_t& value : values) {
    do {
      value = distribution(rng);
    } while (value == 0);
  }
  return values;
}

runtime::Tensor random_tensor(std::mt19937& rng, const runtime::Shape& shape,
                              runtime::Device device) {
  return runtime::Tensor::from_vector(
      random_floats(rng, static_cast<size_t>(runtime::shape_numel(shape))), shape, device);
}

}  // namespace grove::testing
