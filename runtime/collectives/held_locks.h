// Locks a thread holds that a blocking host collective may let go of while it
// waits for the other ranks.
//
// Note [Waiting under the capture lock]: the tree manager runs warm-ups and
// the first replay of a recording under its device's capture lock
// (cudagraph_trees/capture_lock.h, Note [One capture lock per device]). On
// sim, a collective is a host kernel that blocks until every rank's thread
// arrives; a rank that blocks while holding that lock would keep any rank
// sharing the device from reaching the collective, and the step would
// deadlock (then time out). The tree therefore marks the lock as held
// (HeldLock) and the host collective releases it for exactly the time it
// waits (ReleaseHeldLocks), taking it back before it touches memory again.
// This is sound on sim because what the lock protects there is the device's
// own state, which the waiting rank does not touch while it waits. NCCL on
// cuda never blocks the host inside a collective, so it never releases; ranks
// on cuda have a device each and so never share a lock.
#pragma once

#include <mutex>
#include <vector>

namespace grove::runtime::collectives {

// Marks `mutex`, which the calling thread has just locked, as held for the
// guard's lifetime (declare it after the lock so it ends first).
class HeldLock {
 public:
  explicit HeldLock(std::mutex& mutex);
  ~HeldLock();
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
};

// Unlocks every mutex the calling thread marked as held, and locks them again
// (in the order they were taken) when the scope ends, even by an exception.
class ReleaseHeldLocks {
 public:
  ReleaseHeldLocks();
  ~ReleaseHeldLocks();
  ReleaseHeldLocks(const ReleaseHeldLocks&) = delete;
  ReleaseHeldLocks& operator=(const ReleaseHeldLocks&) = delete;

 private:
  std::vector<std::mutex*> released_;
};

}  // namespace grove::runtime::collectives
