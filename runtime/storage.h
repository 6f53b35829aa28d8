// Storage is one span of device memory shared by every tensor view of it.
// It is held through std::shared_ptr (strong count) and std::weak_ptr (weak
// count): the tree manager keeps weak references to know whether an output is
// still alive. A storage may own its memory (an allocator block, freed when
// the last strong reference goes) or merely point at memory someone else owns
// (a graph replay's output inside the tree's pool); the owner can be swapped
// later, which is how a checkpoint restore rebinds live outputs.
#pragma once

#include <memory>
#include <string>

#include "runtime/device.h"
#include "runtime/error.h"

namespace grove::runtime {

// Frees one piece of memory when destroyed.
class MemoryOwner {
 public:
  virtual ~MemoryOwner() = default;
  // False once whoever handed the memory out took it back (an allocator's
  // restore or release_pool): destroying this owner then frees nothing.
  virtual bool holds_memory() const { return true; }
};

class Storage {
 public:
  Storage(void* data, size_t nbytes, Device device, std::unique_ptr<MemoryOwner> owner)
      : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The address for reading or writing data; throws StaleTensorError once poisoned.
  void* data() const {
    if (poisoned_ || overwritten_ != nullptr) [[unlikely]]
      throw_stale();
    return data_;
  }
  // The address for comparisons only (never dereference): works when poisoned.
  void* address() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Whether destroying this storage (or poisoning it) would free memory.
  bool owns_memory() const { return owner_ != nullptr && owner_->holds_memory(); }
  // Replaces the owner; the previous owner (if any) is destroyed first.
  void set_owner(std::unique_ptr<MemoryOwner> owner);
  // Gives up ownership without freeing (the caller took responsibility).
  std::unique_ptr<MemoryOwner> release_owner() { return std::move(owner_); }

  // Note [Poisoned storage]: poisoning frees the memory the storage owns and
  // makes every later data access through any view throw StaleTensorError with
  // `message`. Addresses stay readable so the tree can still compare them.
  void poison(std::string message);
  bool is_poisoned() const { return poisoned_; }
  const std::string& poison_message() const { return poison_message_; }

  // Note [Overwritten storage]: a storage whose memory someone else rewrote
  // (a graph replay's output after a later replay of the same graph) throws
  // StaleTensorError with `*message` on every later data access, like a
  // poisoned one, but frees nothing and can be cleared when its memory is
  // handed out again. Marking and clearing copy a shared pointer (no
  // allocation). Test: TreeLifecycle.KeptReplayOutputThrowsOnceTheNextReplayOverwritesIt.
  void mark_overwritten(const std::shared_ptr<const std::string>& message) {
    overwritten_ = message;
  }
  void clear_overwritten() { overwritten_.reset(); }
  bool is_overwritten() const { return overwritten_ != nullptr; }
  // Points this storage at other memory (a clone of its values) with its owner.
  void rebind(void* data, std::unique_ptr<MemoryOwner> owner);

 private:
  [[noreturn]] void throw_stale() const;

  void* data_;
  size_t nbytes_;
  Device device_;
  std::unique_ptr<MemoryOwner> owner_;
  bool poisoned_ = false;
  std::string poison_message_;
  std::shared_ptr<const std::string> overwritten_;
};

using StoragePtr = std::shared_ptr<Storage>;
using WeakStoragePtr = std::weak_ptr<Storage>;

}  // namespace grove::runtime
