// CommunicationStream: the side stream on which a rank's collectives run so
// that they overlap the compute stream's remaining work (a bucket's gradient
// all-reduce overlapping the rest of the backward). Work reaches it by a fork
// (an event recorded on the compute stream, waited on by the side stream) and
// comes back by a join (an event recorded on the side stream, waited on by the
// compute stream). Under stream capture these events are exactly CUDA's
// fork/join pattern: the side stream joins the capture at the first fork and
// its work becomes a branch of the graph parallel to the compute stream's.
//
// Note [Communication stream]: between a fork and the join that follows it,
// the memory a collective on the side stream reads and writes (a bucket's
// gradients) belongs to the side stream alone:
//   - the compute stream neither reads nor writes it: the bucket's gradients
//     are final when the bucket is forked (each was copied into its buffer
//     before the fork), and the next reader (the optimizer step) runs after
//     the join;
//   - it is persistent memory (the `grad.<param>` buffers of the backward,
//     allocated once, outside any pool), never a block of the caching
//     allocator, so no block can be freed on the compute stream and reused
//     while the side stream still uses it: the allocator needs no cross-stream
//     lifetime tracking (no record_stream);
//   - every fork is joined before the work that forked it ends (the backward
//     program ends with a collective_join), so a capture never ends with the
//     side stream unjoined and an eager step never leaves collectives running
//     behind the optimizer.
// distributed/gradient_all_reduce.cc checks the first two when it
// builds the backward; the sim platform checks the third for every capture.
#pragma once

#include <map>
#include <memory>

#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime::collectives {

class CommunicationStream {
 public:
  explicit CommunicationStream(Device device);
  ~CommunicationStream();
  CommunicationStream(const CommunicationStream&) = delete;
  CommunicationStream& operator=(const CommunicationStream&) = delete;

  Device device() const { return device_; }
  StreamHandle stream() const { return stream_; }

  // Makes the side stream wait for all work enqueued on `compute` so far.
  // A pending fork from another stream (a step that failed before its join)
  // is first joined into `compute` when neither stream is capturing.
  void fork_from(StreamHandle compute);
  // Makes `compute` wait for all work enqueued on the side stream so far.
  // Nothing happens when nothing was forked since the last join. Throws
  // grove::Error when `compute` is not the stream the pending work was forked
  // from (a join on another stream would leave the fork dangling).
  void join_into(StreamHandle compute);
  // Whether work was forked and not yet joined.
  bool forked() const { return forked_; }
  // Forks since this object was made (for tests and stats).
  int64_t fork_count() const { return fork_count_; }

 private:
  Device device_;
  Platform& platform_;
  StreamHandle stream_;
  EventHandle fork_event_;
  EventHandle join_event_;
  bool forked_ = false;
  StreamHandle forked_from_;
  int64_t fork_count_ = 0;
};

// The calling thread's communication stream on `device`, made at first use.
// Per (device, thread), like the tree managers (Note [One thread per GPU] in
// runtime/cuda/nccl_communicator.h): a rank's thread forks and joins its own.
CommunicationStream& communication_stream(Device device);

}  // namespace grove::runtime::collectives
