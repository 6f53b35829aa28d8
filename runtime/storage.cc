#include "runtime/storage.h"

namespace grove::runtime {

void Storage::set_owner(std::unique_ptr<MemoryOwner> owner) {
  owner_.reset();
  owner_ = std::move(owner);
}

void Storage::poison(std::string message) {
  poisoned_ = true;
  poison_message_ = std::move(message);
  owner_.reset();
}

void Storage::rebind(void* data, std::unique_ptr<MemoryOwner> owner) {
  owner_.reset();
  data_ = data;
  owner_ = std::move(owner);
  overwritten_.reset();
}

void Storage::throw_stale() const {
  throw StaleTensorError(poisoned_ ? poison_message_ : *overwritten_);
}

}  // namespace grove::runtime
