// cuda-only: how the cuda Platform loads PTX (Note [Kernels loaded in the
// background], runtime/cuda/kernel_loader.cc; Note [One entry of a PTX
// module], runtime/cuda/ptx_entries.cc). Skips with "no CUDA device" where
// there is none.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_platform.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

// x[i] = x[i] * kScale + kOffset[entry] over n elements; two entries share the
// constant table, so cutting the module keeps it for each. `tag` makes the
// text (and so the library) differ between calls.
std::string two_entry_module(const std::string& tag, float scale) {
  uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof(bits));
  char scale_bits[16];
  std::snprintf(scale_bits, sizeof(scale_bits), "0f%08X", bits);
  auto entry = [&](const std::string& name, int offset_index) {
    return ".visible .entry " + name +
           "(\n\t.param .u64 data,\n\t.param .u64 n\n)\n{\n"
           "\t.reg .pred %p<2>;\n\t.reg .b32 %r<2>;\n\t.reg .f32 %f<5>;\n\t.reg .b64 %rd<6>;\n"
           "\tld.param.u64 %rd1, [data];\n\tld.param.u64 %rd2, [n];\n"
           "\tmov.u32 %r1, %tid.x;\n\tcvt.u64.u32 %rd3, %r1;\n"
           "\tsetp.ge.u64 %p1, %rd3, %rd2;\n\t@%p1 bra DONE;\n"
           "\tcvta.to.global.u64 %rd4, %rd1;\n\tshl.b64 %rd5, %rd3, 2;\n"
           "\tadd.s64 %rd4, %rd4, %rd5;\n\tld.global.f32 %f1, [%rd4];\n"
           "\tld.const.f32 %f2, [offsets+" +
           std::to_string(4 * offset_index) +
           "];\n"
           "\tmul.rn.f32 %f3, %f1, " +
           std::string(scale_bits) +
           ";\n"
           "\tadd.rn.f32 %f4, %f3, %f2;\n\tst.global.f32 [%rd4], %f4;\nDONE:\n\tret;\n}\n";
  };
  return "// " + tag + "\n.version 8.0\n.target sm_80\n.address_size 64\n\n" +
         ".const .align 4 .f32 offsets[2] = {0f3F800000, 0f40000000};\n\n" +
         entry("grove_test_first", 0) + "\n" + entry("grove_test_second", 1);
}

class KernelLoadingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    context_ = &device_context(kCudaDevice);
    stream_ = context_->create_stream();
  }
  void TearDown() override {
    ::unsetenv("GROVE_KERNEL_LOAD_THREADS");
    ::unsetenv("GROVE_PTX_ONE_ENTRY");
  }
  Platform& platform() { return context_->platform(); }

  KernelHandle load(const std::string& ptx, const std::string& name) {
    KernelSource source;
    source.name = name;
    source.ptx = ptx;
    return platform().load_kernel(source);
  }
  // Runs `kernel` over `values` and returns them after.
  std::vector<float> run(KernelHandle kernel, const std::vector<float>& values) {
    const int64_t n = static_cast<int64_t>(values.size());
    Tensor data = Tensor::from_vector(values, {n}, kCudaDevice);
    LaunchDims dims;
    dims.block.x = 128;
    platform().launch_kernel(kernel, dims, KernelArgs().add_pointer(data.data_ptr()).add_i64(n),
                             stream_);
    platform().synchronize_stream(stream_);
    return data.to_vector<float>();
  }

  DeviceContext* context_ = nullptr;
  StreamHandle stream_;
};

std::vector<float> expected(const std::vector<float>& values, float scale, float offset) {
  std::vector<float> result;
  for (float value : values) result.push_back(value * scale + offset);
  return result;
}

TEST_F(KernelLoadingTest, EachEntryOfAModuleLoadsAloneAndMatchesTheWholeModuleBitwise) {
  std::mt19937 rng(11);
  const std::vector<float> values = ::grove::testing::random_floats(rng, 100);
  const std::string module = two_entry_module("one entry", 1.5f);
  std::vector<float> first = run(load(module, "grove_test_first"), values);
  std::vector<float> second = run(load(module, "grove_test_second"), values);
  EXPECT_EQ(first, expected(values, 1.5f, 1.0f));
  EXPECT_EQ(second, expected(values, 1.5f, 2.0f));
  // KernelSource::whole_module: the module JITed once for both entries.
  const std::string whole = two_entry_module("whole module", 1.5f);
  KernelSource source;
  source.name = "grove_test_first";
  source.ptx = whole;
  source.whole_module = true;
  EXPECT_EQ(run(platform().load_kernel(source), values), first);
  source.name = "grove_test_second";
  EXPECT_EQ(run(platform().load_kernel(source), values), second);
  ::setenv("GROVE_PTX_ONE_ENTRY", "0", 1);
  ::setenv("GROVE_KERNEL_LOAD_THREADS", "0", 1);
  EXPECT_EQ(run(load(module, "grove_test_first"), values), first);
  EXPECT_EQ(run(load(module, "grove_test_second"), values), second);
}

TEST_F(KernelLoadingTest, KernelsLoadedInTheBackgroundMatchTheCallersLoads) {
  std::mt19937 rng(12);
  const std::vector<float> values = ::grove::testing::random_floats(rng, 128);
  ::setenv("GROVE_KERNEL_LOAD_THREADS", "4", 1);
  std::vector<KernelHandle> background;
  for (int i = 0; i < 12; ++i) {
    background.push_back(load(two_entry_module("background " + std::to_string(i), 0.5f + i),
                              i % 2 ? "grove_test_second" : "grove_test_first"));
  }
  platform().wait_for_kernel_loads();
  ::setenv("GROVE_KERNEL_LOAD_THREADS", "0", 1);
  for (int i = 0; i < 12; ++i) {
    KernelHandle in_caller = load(two_entry_module("in the caller " + std::to_string(i), 0.5f + i),
                                  i % 2 ? "grove_test_second" : "grove_test_first");
    const std::vector<float> result = run(background[static_cast<size_t>(i)], values);
    EXPECT_EQ(result, expected(values, 0.5f + i, i % 2 ? 2.0f : 1.0f)) << "module " << i;
    EXPECT_EQ(result, run(in_caller, values)) << "module " << i;
  }
}

TEST_F(KernelLoadingTest, AFailedBackgroundJitIsThrownByTheWait) {
  ::setenv("GROVE_KERNEL_LOAD_THREADS", "2", 1);
  std::string broken = two_entry_module("broken", 1.0f);
  broken.replace(broken.find("mul.rn.f32"), 10, "mul.xx.f32");
  KernelHandle kernel = load(broken, "grove_test_first");
  try {
    platform().wait_for_kernel_loads();
    ADD_FAILURE() << "the JIT of broken PTX should fail";
  } catch (const DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("grove_test_first"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(run(kernel, {1.0f}), DeviceError);  // the launch throws the same error
}

}  // namespace
}  // namespace grove::runtime
