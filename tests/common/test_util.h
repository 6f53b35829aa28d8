// Helpers every test may use: the devices to run on (sim always, cuda:0 too),
// a fixture that skips cuda when the machine has no CUDA device, seeded random
// inputs and tensors whose seed is printed on failure, expected errors with
// their messages, and environment variables set for one scope.
//
//   class MyTest : public grove::testing::DeviceTest {};
//   TEST_P(MyTest, DoesSomething) { runtime::Device device = GetParam(); ... }
//   GROVE_INSTANTIATE_DEVICE_TEST_SUITE(MyTest);
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/tensor.h"

namespace grove::testing {

// sim:0 and cuda:0. cuda stays in the list on machines without a GPU so that
// the skip is visible in the test output.
std::vector<runtime::Device> test_devices();
// "sim0", "cuda0": a test-name-safe spelling of the parameter.
std::string device_test_name(const ::testing::TestParamInfo<runtime::Device>& info);

// A parameterized fixture whose SetUp skips devices this machine lacks with
// GTEST_SKIP() << "no CUDA device". Subclasses overriding SetUp call it first
// and return when IsSkipped().
class DeviceTest : public ::testing::TestWithParam<runtime::Device> {
 protected:
  void SetUp() override;
  runtime::Device device() const { return GetParam(); }
};

// The seed of the running test: GROVE_TEST_SEED when set, otherwise a stable
// hash of the test's full name (so runs are reproducible by default).
uint64_t test_seed();

// A std::mt19937 seeded with test_seed(); it adds a SCOPED_TRACE naming the
// seed (and how to rerun with it) to every failure in the enclosing scope.
#define GROVE_SEEDED_RNG(rng)                                                                 \
  const uint64_t rng##_seed = ::grove::testing::test_seed();                                  \
  SCOPED_TRACE(::testing::Message() << "random seed " << rng##_seed                           \
                                    << " (rerun with GROVE_TEST_SEED=" << rng##_seed << ")"); \
  std::mt19937 rng(static_cast<std::mt19937::result_type>(rng##_seed))

// `count` floats uniform in [low, high) with none exactly zero.
std::vector<float> random_floats(std::mt19937& rng, size_t count, float low = -4.0f,
                                 float high = 4.0f);
// `count` integers uniform in [low, high] with none zero (requires a nonzero in range).
std::vector<int64_t> random_ints(std::mt19937& rng, size_t count, int64_t low, int64_t high);
// An f32 tensor of `shape` on `device` holding random_floats().
runtime::Tensor random_tensor(std::mt19937& rng, const runtime::Shape& shape,
                              runtime::Device device = runtime::kSimDevice);

// Expects `call` to throw ErrorType (or a subclass) whose message contains
// every one of `needles`; another exception, or none, is a failure.
template <typename ErrorType>
void expect_error(const std::function<void()>& call, std::initializer_list<std::string> needles) {
  try {
    call();
    ADD_FAILURE() << "no error thrown";
  } catch (const ErrorType& error) {
    const std::string message = error.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message lacks '" << needle << "': " << message;
    }
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong error type: " << error.what();
  }
}

// Sets an environment variable for one scope (unsets it where value is
// null), then restores what it was (unset if it was unset).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (before_) {
      setenv(name_, before_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

}  // namespace grove::testing

// Instantiates a DeviceTest suite over test_devices().
#define GROVE_INSTANTIATE_DEVICE_TEST_SUITE(Suite)                                                \
  INSTANTIATE_TEST_SUITE_P(Devices, Suite, ::testing::ValuesIn(::grove::testing::test_devices()), \
                           ::grove::testing::device_test_name)
