// DeviceContext is everything grove keeps per device: its Platform, its
// CachingAllocator, and each thread's current stream. Contexts are created on
// first use and live for the whole process.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

class DeviceContext {
 public:
  DeviceContext(Device device, std::unique_ptr<Platform> platform);
  ~DeviceContext();

  Device device() const { return device_; }
  Platform& platform() { return *platform_; }
  CachingAllocator& allocator() { return *allocator_; }

  // The calling thread's current stream on this device. By default each thread
  // gets a stream of its own (never the legacy default stream).
  StreamHandle current_stream();
  void set_current_stream(StreamHandle stream);
  // A new stream owned by the context (destroyed with it).
  StreamHandle create_stream();
  // The calling thread's event for ordering one stream after another (a
  // record, then a wait, with nothing between them on this thread): created on
  // the thread's first use, owned by the context, and reused by every later
  // ordering, so a call from PyTorch's legacy default stream creates and
  // destroys no event (Note [Calls from the legacy default stream], capi/grove.cc).
  EventHandle ordering_event();
  // The calling thread's stream ordered with the legacy default stream both
  // ways (Platform::create_legacy_ordered_stream): created on the thread's
  // first use, owned by the context (Note [Calls from the legacy default
  // stream], capi/grove.cc). cuda only.
  StreamHandle legacy_ordered_stream();

 private:
  Device device_;
  std::unique_ptr<Platform> platform_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::mutex mutex_;
  std::vector<StreamHandle> owned_streams_;
  std::vector<EventHandle> owned_events_;
};

// The context of `device`; throws DeviceError when the device does not exist
// (e.g. "cuda:0" on a machine with no CUDA device).
DeviceContext& device_context(Device device);

// A kernel the runtime itself ships (a collective's host kernel, the span
// copy): loaded on `device` the first time, by name (and whether it offers
// programmatic PTX), and the same handle returned after that. Thread-safe.
KernelHandle load_kernel_once(Device device, const KernelSource& source);
// Whether `device` can be used here.
bool device_available(Device device);
int cuda_device_count();
// cuda:0 when a CUDA device exists, sim:0 otherwise.
Device default_device();

// Note [The caller's current device stays as it was]
// grove makes a model's GPU the calling thread's current CUDA device before it
// allocates, captures or launches there (CudaPlatform::use_device), and left
// it so: a model on cuda:1 called from a thread whose current device was
// cuda:0 moved that thread to cuda:1, so PyTorch's next torch.empty(...,
// device="cuda") and torch.cuda.current_device() silently named another GPU.
// Every entry point of the C API (capi's run_api, and the destroy functions)
// and the deleters of the tensors it hands out hold a CallerDeviceGuard, which puts back the device
// current at entry where grove changed it: two cudaGetDevice calls a call, none
// where the process has no CUDA device. Tests: GpuMultiDeviceTest
// (tests/python/gpu_multi_device_test.py, on two GPUs).
class CallerDeviceGuard {
 public:
  CallerDeviceGuard();
  ~CallerDeviceGuard();
  CallerDeviceGuard(const CallerDeviceGuard&) = delete;
  CallerDeviceGuard& operator=(const CallerDeviceGuard&) = delete;

 private:
  int device_ = -1;  // -1: nothing to put back
};

// Sets the current stream of a device for the calling thread within a scope.
class StreamGuard {
 public:
  StreamGuard(Device device, StreamHandle stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceContext& context_;
  StreamHandle previous_;
};

}  // namespace grove::runtime
