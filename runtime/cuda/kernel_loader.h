// Loading PTX on the side: the driver's JIT (cudaLibraryLoadData) of each
// module runs on a few threads of its own while the compiler goes on (Note
// [Kernels loaded in the background]), and a kernel is looked up in its
// library when it is first used.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace grove::runtime::cuda_detail {

struct CudaKernel {
  std::string name;
  int device = 0;
  // Loaded from KernelSource::ptx_programmatic: launched with programmatic
  // dependent launch (Note [Programmatic dependent launch]).
  bool programmatic = false;
  uint32_t max_dynamic_shared_bytes = 0;  // beyond 48 KiB, allowed at lookup
  std::shared_future<cudaLibrary_t> library;

  // The kernel, after waiting for its library's JIT (which throws its error)
  // and looking it up once. Thread-safe.
  cudaKernel_t get() const {
    cudaKernel_t kernel = kernel_.load(std::memory_order_acquire);
    return kernel != nullptr ? kernel : look_up();
  }
  bool looked_up() const { return kernel_.load(std::memory_order_acquire) != nullptr; }

 private:
  cudaKernel_t look_up() const;
  mutable std::atomic<cudaKernel_t> kernel_{nullptr};
  mutable std::mutex mutex_;
};

// Threads that JIT PTX modules for one device, in the order asked.
class KernelLoader {
 public:
  explicit KernelLoader(int device) : device_(device) {}
  ~KernelLoader();  // finishes the queued loads
  KernelLoader(const KernelLoader&) = delete;
  KernelLoader& operator=(const KernelLoader&) = delete;

  // The library of `code` (PTX or an image; it must outlive the load),
  // loaded on one of `threads` loader threads (started at the first such
  // load), or now in the caller where `threads` is 0; `what` names it in
  // errors ("the PTX of kernel 'k' on cuda:0").
  std::shared_future<cudaLibrary_t> load(const std::string& code, const std::string& kernel_name,
                                         const std::string& what, int threads);

 private:
  void run();

  int device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// GROVE_KERNEL_LOAD_THREADS: loader threads per device (default: 8, at most
// the host's cores; 0: load in the caller).
int kernel_load_threads();

}  // namespace grove::runtime::cuda_detail
