#include "capi/handed_out_storages.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/error.h"

namespace grove::capi {

namespace {

struct HandedOut {
  uintptr_t end = 0;
  runtime::WeakStoragePtr storage;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, HandedOut> by_start;  // keyed by the storage's first byte
  std::atomic<size_t> size{0};
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: used at exit
  return *instance;
}

// Drops every entry whose storage is gone; called with the mutex held when
// the map has grown (hand-outs of warm-ups and recordings move through the
// pool, replays reuse their addresses and replace their own entries).
void prune(Registry& state) {
  for (auto it = state.by_start.begin(); it != state.by_start.end();) {
    it = it->second.storage.expired() ? state.by_start.erase(it) : std::next(it);
  }
}

}  // namespace

void remember_handed_out(const runtime::StoragePtr& storage) {
  if (storage == nullptr || storage->nbytes() == 0) return;
  auto start = reinterpret_cast<uintptr_t>(storage->address());
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.by_start[start] = HandedOut{start + storage->nbytes(), storage};
  if (state.by_start.size() > 4096) prune(state);
  state.size.store(state.by_start.size(), std::memory_order_relaxed);
}

bool inside_stale_hand_out(const void* data, std::string* message) {
  Registry& state = registry();
  if (data == nullptr || state.size.load(std::memory_order_relaxed) == 0) return false;
  auto address = reinterpret_cast<uintptr_t>(data);
  runtime::StoragePtr storage;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.by_start.upper_bound(address);
    if (it == state.by_start.begin()) return false;
    --it;
    if (address >= it->second.end) return false;
    storage = it->second.storage.lock();
    if (storage == nullptr) {
      state.by_start.erase(it);
      state.size.store(state.by_start.size(), std::memory_order_relaxed);
      return false;
    }
  }
  if (!storage->is_poisoned() && !storage->is_overwritten()) return false;
  try {
    (void)storage->data();  // throws StaleTensorError with the output's message
  } catch (const StaleTensorError& error) {
    *message = error.what();
  }
  return true;
}

}  // namespace grove::capi
