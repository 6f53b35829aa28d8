#include "runtime/compile_profile.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <utility>

namespace grove::runtime {
namespace {

// Note [Compile profile]: a cold compile is code generation, the driver's JIT
// of each distinct PTX module (cudaLibraryLoadData), the GEMM tuning's
// measurements and the libraries' first setup; the events say which took the
// time. Off by default (no cost but one relaxed load); the events of every
// thread land in one list, because the JIT runs on loader threads (Note
// [Kernels loaded in the background], runtime/cuda/cuda_platform.cc).
// benchmarks/eager_latency prints them per model.
std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag = [] {
    const char* value = std::getenv("GROVE_COMPILE_PROFILE");
    return value != nullptr && *value != '\0' && std::string_view(value) != "0";
  }();
  return flag;
}

struct EventList {
  std::mutex mutex;
  std::vector<CompileEvent> events;
};

EventList& event_list() {
  static EventList* list = new EventList();
  return *list;
}

}  // namespace

bool compile_profile_enabled() { return enabled_flag().load(std::memory_order_relaxed); }

void set_compile_profile(bool enabled) { enabled_flag().store(enabled); }

void record_compile_event(CompileEvent event) {
  if (!compile_profile_enabled()) return;
  EventList& list = event_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.events.push_back(std::move(event));
}

std::vector<CompileEvent> take_compile_events() {
  EventList& list = event_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  return std::exchange(list.events, {});
}

CompileEventTimer::CompileEventTimer(std::string category, std::string name, size_t bytes)
    : enabled_(compile_profile_enabled()) {
  if (!enabled_) return;
  event_.category = std::move(category);
  event_.name = std::move(name);
  event_.bytes = bytes;
  start_ = std::chrono::steady_clock::now();
}

CompileEventTimer::~CompileEventTimer() {
  if (!enabled_) return;
  event_.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  record_compile_event(std::move(event_));
}

}  // namespace grove::runtime
