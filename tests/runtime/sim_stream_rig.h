// A sim platform of its own with chosen SimOptions, a caching allocator over it
// and two streams, plus two host kernels: `produce` (out[i] = value, after an
// optional gate opens) and `consume` (out[i] = in[i] + 1). The sim stream
// tests (sim_async_test, sim_hazard_test) use it to stage races on purpose.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/sim/sim_platform.h"

namespace grove::testing {

// A flag a `produce` kernel waits on before it writes, so a test decides when
// the producing stream finishes.
struct Gate {
  std::atomic<bool> open{false};
};

inline void produce_kernel(const runtime::LaunchDims*, const uint64_t* args) {
  auto* out = reinterpret_cast<float*>(args[0]);
  auto n = static_cast<int64_t>(args[1]);
  float value;
  auto bits = static_cast<uint32_t>(args[2]);
  std::memcpy(&value, &bits, sizeof(value));
  if (auto* gate = reinterpret_cast<Gate*>(args[3]); gate != nullptr) {
    while (!gate->open.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

inline void consume_kernel(const runtime::LaunchDims*, const uint64_t* args) {
  auto* in = reinterpret_cast<const float*>(args[0]);
  auto* out = reinterpret_cast<float*>(args[1]);
  auto n = static_cast<int64_t>(args[2]);
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] + 1.0f;
}

struct SimStreamRig {
  explicit SimStreamRig(runtime::SimOptions options)
      : platform(runtime::make_sim_platform(runtime::kSimDevice, options)),
        allocator(std::make_unique<runtime::CachingAllocator>(*platform)),
        a(platform->create_stream()),
        b(platform->create_stream()),
        produce(platform->load_kernel({"produce", "", &produce_kernel})),
        consume(platform->load_kernel({"consume", "", &consume_kernel})) {}
  ~SimStreamRig() {
    platform->synchronize_device();
    allocator.reset();
    platform->destroy_stream(a);
    platform->destroy_stream(b);
  }

  runtime::StoragePtr buffer(int64_t n, runtime::StreamHandle stream) {
    return allocator->allocate(static_cast<size_t>(n) * sizeof(float), stream);
  }
  void launch_produce(const runtime::StoragePtr& out, int64_t n, float value,
                      runtime::StreamHandle stream, Gate* gate = nullptr) {
    platform->launch_kernel(produce, {},
                            runtime::KernelArgs()
                                .add_pointer(out->address())
                                .add_i64(n)
                                .add_f32(value)
                                .add_pointer(gate),
                            stream);
  }
  void launch_consume(const runtime::StoragePtr& in, const runtime::StoragePtr& out, int64_t n,
                      runtime::StreamHandle stream) {
    platform->launch_kernel(
        consume, {},
        runtime::KernelArgs().add_pointer(in->address()).add_pointer(out->address()).add_i64(n),
        stream);
  }
  // `n` floats of `storage`, read on `stream` after its queued work.
  std::vector<float> read(const runtime::StoragePtr& storage, int64_t n,
                          runtime::StreamHandle stream) {
    std::vector<float> values(static_cast<size_t>(n));
    platform->copy_async(values.data(), storage->address(), values.size() * sizeof(float),
                         runtime::CopyKind::kDeviceToHost, stream);
    platform->synchronize_stream(stream);
    return values;
  }
  // Makes `waiter` wait for the work queued on `signaller` so far.
  void order(runtime::StreamHandle signaller, runtime::StreamHandle waiter) {
    runtime::EventHandle event = platform->create_event(false);
    platform->record_event(event, signaller);
    platform->stream_wait_event(waiter, event);
    platform->destroy_event(event);
  }
  std::vector<runtime::sim::SimHazard> hazards() { return runtime::sim_hazards(*platform); }

  std::unique_ptr<runtime::Platform> platform;
  std::unique_ptr<runtime::CachingAllocator> allocator;
  runtime::StreamHandle a, b;
  runtime::KernelHandle produce, consume;
};

}  // namespace grove::testing
