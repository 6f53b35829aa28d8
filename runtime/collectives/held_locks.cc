#include "runtime/collectives/held_locks.h"

#include <algorithm>

namespace grove::runtime::collectives {
namespace {

// Trivially destructible on purpose: tree managers are thread_local too and
// are destroyed at thread exit in an unspecified order relative to other
// thread_locals; a std::vector here could be gone when a manager's shutdown()
// marks the capture lock as held.
constexpr int kMaxHeld = 8;
struct HeldStack {
  std::mutex* locks[kMaxHeld];
  int count;
};
thread_local HeldStack held_stack = {{}, 0};

}  // namespace

HeldLock::HeldLock(std::mutex& mutex) {
  // Deeper nesting is not tracked (and so not released while waiting).
  if (held_stack.count < kMaxHeld) held_stack.locks[held_stack.count] = &mutex;
  ++held_stack.count;
}

HeldLock::~HeldLock() { --held_stack.count; }

ReleaseHeldLocks::ReleaseHeldLocks()
    : released_(held_stack.locks, held_stack.locks + std::min(held_stack.count, kMaxHeld)) {
  for (auto it = released_.rbegin(); it != released_.rend(); ++it) (*it)->unlock();
}

ReleaseHeldLocks::~ReleaseHeldLocks() {
  for (std::mutex* mutex : released_) mutex->lock();
}

}  // namespace grove::runtime::collectives
