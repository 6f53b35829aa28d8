#include "runtime/sim/host_blas.h"

#include <mutex>

#include "runtime/sim/host_gemm.h"

namespace grove::runtime::sim {
namespace {

class HostBlas final : public BlasSupport {
 public:
  explicit HostBlas(Platform& platform) : platform_(platform) {}

  void gemm_row_major(StreamHandle stream, const GemmArgs& args) override {
    platform_.launch_kernel(kernel(), LaunchDims{}, host_gemm_kernel_args(args), stream);
  }

  bool gemm_row_major_epilogue_available(GemmEpilogue, DType, int64_t, int64_t, int64_t) override {
    return true;  // the host GEMM computes every epilogue
  }

  void prepare_gemm(StreamHandle) override {}

 private:
  KernelHandle kernel() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!kernel_) {
      KernelSource source;
      source.name = "grove_host_gemm";
      source.host_function = host_gemm_kernel();
      kernel_ = platform_.load_kernel(source);
    }
    return kernel_;
  }

  Platform& platform_;
  std::mutex mutex_;
  KernelHandle kernel_;
};

}  // namespace

std::unique_ptr<BlasSupport> make_host_blas(Platform& platform) {
  return std::make_unique<HostBlas>(platform);
}

}  // namespace grove::runtime::sim
