#include "runtime/cuda/kernel_loader.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>

#include "runtime/compile_profile.h"
#include "runtime/cuda/cuda_error.h"
#include "runtime/environment.h"
#include "runtime/error.h"

namespace grove::runtime::cuda_detail {
namespace {

constexpr size_t kJitLogBytes = 8192;

// The driver's JIT of `code`; throws DeviceError with its log.
cudaLibrary_t load_library(int device, const std::string& code, const std::string& kernel_name,
                           const std::string& what, bool onto_the_device) {
  CompileEventTimer timer("jit", kernel_name, code.size());
  GROVE_CUDA_CHECK(cudaSetDevice(device), "selecting cuda:", device, " to load ", what);
  std::array<char, kJitLogBytes> error_log{};
  std::array<cudaJitOption, 2> options = {cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes};
  std::array<void*, 2> values = {error_log.data(),
                                 reinterpret_cast<void*>(uintptr_t{kJitLogBytes})};
  cudaLibrary_t library = nullptr;
  cudaError_t status = cudaLibraryLoadData(&library, code.data(), options.data(), values.data(),
                                           options.size(), nullptr, nullptr, 0);
  if (status != cudaSuccess) {
    std::string log(error_log.data());
    throw_cuda_error(
        status, "cudaLibraryLoadData",
        str_cat("loading ", what, log.empty() ? "" : str_cat(" (JIT log: ", log, ")")));
  }
  // Under lazy module loading (CUDA_MODULE_LOADING=LAZY, CUDA's default) the
  // library reaches the device at its first use; asking for the kernel's
  // attributes here loads it now, on this thread. A kernel the module lacks
  // is reported at its lookup instead. (The caller's loads, the old path,
  // leave it to the first launch.)
  cudaKernel_t kernel = nullptr;
  if (onto_the_device &&
      cudaLibraryGetKernel(&kernel, library, kernel_name.c_str()) == cudaSuccess) {
    CompileEventTimer device_load("device load", kernel_name);
    cudaFuncAttributes attributes{};
    cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel));
  }
  cudaGetLastError();
  return library;
}

}  // namespace

// Note [Kernels loaded in the background]: cudaLibraryLoadData JITs a PTX
// module to the device's machine code, tens of milliseconds for one generated
// kernel (a cold compile of gpt4x256 loads 34 of them, and each GEMM tuning
// its candidates), and the lowering asked for them one after another. Now
// load_kernel hands the JIT to KernelLoader's threads and returns at once:
// the compiler goes on generating the next kernels while the driver compiles
// the earlier ones, several at a time. A kernel is looked up in its library
// (cudaLibraryGetKernel) the first time it is used - a launch, a graph node,
// or Platform::wait_for_kernel_loads, which schedule_program calls last, so a
// compile still returns with its kernels loaded and throws a JIT error
// itself. The machine code does not depend on which thread compiled it, and
// the driver does JIT side by side (session 23 r2, H200: 12 modules in 440 ms
// on 8 threads, 1857 ms on one). GROVE_KERNEL_LOAD_THREADS=0 loads in the
// caller (the old path).
// Tests: KernelLoadingTest.KernelsLoadedInTheBackgroundMatchTheCallersLoads,
// KernelLoadingTest.AFailedBackgroundJitIsThrownByTheWait,
// CudaPlatformTest.LoadingAKernelThatThePtxLacksNamesIt.
cudaKernel_t CudaKernel::look_up() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cudaKernel_t kernel = kernel_.load(std::memory_order_acquire)) return kernel;
  cudaLibrary_t loaded = nullptr;
  {
    CompileEventTimer timer("jit wait", name);
    loaded = library.get();  // rethrows the JIT's error
  }
  CompileEventTimer timer("lookup", name);
  cudaKernel_t kernel = nullptr;
  GROVE_CUDA_CHECK(cudaLibraryGetKernel(&kernel, loaded, name.c_str()), "looking up kernel '", name,
                   "' in its PTX on cuda:", device,
                   " (is it declared extern \"C\" .entry with that name?)");
  if (max_dynamic_shared_bytes > 48 * 1024) {
    GROVE_CUDA_CHECK(
        cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(max_dynamic_shared_bytes), device),
        "allowing kernel '", name, "' ", max_dynamic_shared_bytes,
        " bytes of dynamic shared memory on cuda:", device);
  }
  kernel_.store(kernel, std::memory_order_release);
  return kernel;
}

KernelLoader::~KernelLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

std::shared_future<cudaLibrary_t> KernelLoader::load(const std::string& code,
                                                     const std::string& kernel_name,
                                                     const std::string& what, int threads) {
  auto promise = std::make_shared<std::promise<cudaLibrary_t>>();
  std::shared_future<cudaLibrary_t> future = promise->get_future().share();
  auto job = [this, promise, &code, kernel_name, what, threads] {
    try {
      promise->set_value(load_library(device_, code, kernel_name, what, threads > 0));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  };
  if (threads == 0) {
    job();
    return future;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (threads_.empty()) {
      for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
    }
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return future;
}

void KernelLoader::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

int kernel_load_threads() {
  constexpr int kDefaultThreads = 8;
  const std::optional<long> threads = integer_from_environment(
      "GROVE_KERNEL_LOAD_THREADS", 0, 64,
      ": expected a thread count from 0 to 64 (0: load kernels in the caller)");
  if (!threads) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    return std::clamp(cores, 1, kDefaultThreads);
  }
  return static_cast<int>(*threads);
}

}  // namespace grove::runtime::cuda_detail
