#include "serving/llm/kv_slots.h"

#include "runtime/error.h"

namespace grove::serving::llm {

KvSlots::KvSlots(int64_t count) : count_(count) {
  GROVE_CHECK(count > 0, "a KV cache needs at least one slot, got ", count);
  for (int64_t slot = 0; slot < count; ++slot) free_.insert(slot);
}

std::optional<int64_t> KvSlots::take() {
  if (free_.empty()) return std::nullopt;
  int64_t slot = *free_.begin();
  free_.erase(free_.begin());
  taken_.insert(slot);
  return slot;
}

void KvSlots::release(int64_t slot) {
  GROVE_CHECK(taken_.erase(slot) == 1, "KV slot ", slot, " released but not taken");
  free_.insert(slot);
}

}  // namespace grove::serving::llm
