#include "runtime/device_context.h"

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "runtime/error.h"
#include "runtime/platform_factory.h"

namespace grove::runtime {
namespace {

constexpr int kMaxDevicesPerType = 64;

struct ContextRegistry {
  std::mutex mutex;
  std::unordered_map<Device, std::unique_ptr<DeviceContext>> contexts;
};

ContextRegistry& registry() {
  static auto* instance = new ContextRegistry();  // lives until exit, never destroyed
  return *instance;
}

thread_local std::unordered_map<const DeviceContext*, StreamHandle> t_current_streams;
thread_local std::unordered_map<const DeviceContext*, EventHandle> t_ordering_events;
thread_local std::unordered_map<const DeviceContext*, StreamHandle> t_legacy_ordered_streams;

// Note [Current stream cache]: the replay path asks for the current stream on
// every call; a one-entry cache of the last (context, stream) pair answers it
// with one comparison instead of a hash lookup. Every write goes through
// set_current_stream / current_stream, which refresh the cache.
struct CurrentStreamCache {
  const DeviceContext* context = nullptr;
  StreamHandle stream;
};
thread_local CurrentStreamCache t_current_stream_cache;

std::unique_ptr<Platform> make_checked_platform(Device device) {
  GROVE_CHECK_AS(DeviceError, device.index >= 0 && device.index < kMaxDevicesPerType, "device ",
                 device.str(), ": index out of range");
  return make_platform(device);
}

}  // namespace

DeviceContext::DeviceContext(Device device, std::unique_ptr<Platform> platform)
    : device_(device),
      platform_(std::move(platform)),
      allocator_(std::make_unique<CachingAllocator>(*platform_)) {}

DeviceContext::~DeviceContext() {
  allocator_.reset();
  for (EventHandle event : owned_events_) platform_->destroy_event(event);
  for (StreamHandle stream : owned_streams_) platform_->destroy_stream(stream);
}

StreamHandle DeviceContext::current_stream() {
  if (t_current_stream_cache.context == this) return t_current_stream_cache.stream;
  auto it = t_current_streams.find(this);
  StreamHandle stream;
  if (it != t_current_streams.end()) {
    stream = it->second;
  } else {
    stream = create_stream();
    t_current_streams.emplace(this, stream);
  }
  t_current_stream_cache = {this, stream};
  return stream;
}

void DeviceContext::set_current_stream(StreamHandle stream) {
  t_current_streams[this] = stream;
  t_current_stream_cache = {this, stream};
}

StreamHandle DeviceContext::create_stream() {
  StreamHandle stream = platform_->create_stream();
  std::lock_guard<std::mutex> lock(mutex_);
  owned_streams_.push_back(stream);
  return stream;
}

EventHandle DeviceContext::ordering_event() {
  auto it = t_ordering_events.find(this);
  if (it != t_ordering_events.end()) return it->second;
  EventHandle event = platform_->create_event(/*enable_timing=*/false);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    owned_events_.push_back(event);
  }
  t_ordering_events.emplace(this, event);
  return event;
}

StreamHandle DeviceContext::legacy_ordered_stream() {
  auto it = t_legacy_ordered_streams.find(this);
  if (it != t_legacy_ordered_streams.end()) return it->second;
  StreamHandle stream = platform_->create_legacy_ordered_stream();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    owned_streams_.push_back(stream);
  }
  t_legacy_ordered_streams.emplace(this, stream);
  return stream;
}

KernelHandle load_kernel_once(Device device, const KernelSource& source) {
  static std::mutex mutex;
  // A kernel with and without its programmatic PTX are two loads (the
  // sequence attention kernel offers both: Note [Programmatic generated kernels]).
  static auto* handles = new std::map<std::tuple<Device, std::string, bool>, KernelHandle>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_tuple(device, source.name, !source.ptx_programmatic.empty());
  auto found = handles->find(key);
  if (found != handles->end()) return found->second;
  KernelHandle handle = device_context(device).platform().load_kernel(source);
  handles->emplace(std::move(key), handle);
  return handle;
}

DeviceContext& device_context(Device device) {
  ContextRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.contexts.find(device);
  if (it != r.contexts.end()) return *it->second;
  auto context = std::make_unique<DeviceContext>(device, make_checked_platform(device));
  DeviceContext& result = *context;
  r.contexts.emplace(device, std::move(context));
  return result;
}

bool device_available(Device device) {
  if (device.index < 0 || device.index >= kMaxDevicesPerType) return false;
  if (device.type == DeviceType::kCuda) return device.index < cuda_device_count();
  return true;
}

Device default_device() { return cuda_device_count() > 0 ? kCudaDevice : kSimDevice; }

StreamGuard::StreamGuard(Device device, StreamHandle stream)
    : context_(device_context(device)), previous_(context_.current_stream()) {
  context_.set_current_stream(stream);
}

StreamGuard::~StreamGuard() { context_.set_current_stream(previous_); }

}  // namespace grove::runtime
