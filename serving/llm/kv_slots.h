// KvSlots hands out the decoder's cache slots, lowest free first, so running
// requests stay packed in the low slots and decode steps use small batch
// buckets (Note [Decode buckets share one pool], decoder.h).
#pragma once

#include <cstdint>
#include <optional>
#include <set>

namespace grove::serving::llm {

class KvSlots {
 public:
  explicit KvSlots(int64_t count);

  // The lowest free slot, now taken; nullopt when every slot is taken.
  std::optional<int64_t> take();
  // Gives `slot` back; throws grove::Error when it was not taken.
  void release(int64_t slot);
  int64_t taken() const { return count_ - static_cast<int64_t>(free_.size()); }
  int64_t count() const { return count_; }
  // One past the highest taken slot (0 when none is taken).
  int64_t extent() const { return taken_.empty() ? 0 : *taken_.rbegin() + 1; }

 private:
  int64_t count_;
  std::set<int64_t> free_;
  std::set<int64_t> taken_;
};

}  // namespace grove::serving::llm
