#include "runtime/collectives/communication_stream.h"

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::runtime::collectives {

CommunicationStream::CommunicationStream(Device device)
    : device_(device), platform_(device_context(device).platform()) {
  stream_ = platform_.create_stream();
  fork_event_ = platform_.create_event(false);
  join_event_ = platform_.create_event(false);
}

CommunicationStream::~CommunicationStream() {
  // At thread exit; a failure to release here must not terminate the process.
  try {
    platform_.destroy_event(fork_event_);
    platform_.destroy_event(join_event_);
    platform_.destroy_stream(stream_);
  } catch (...) {
  }
}

void CommunicationStream::fork_from(StreamHandle compute) {
  GROVE_CHECK(!compute.is_default(), device_.str(),
              ": collectives cannot fork from the legacy default stream; run the step on a "
              "stream from create_stream()");
  if (forked_ && compute != forked_from_) {
    // A fork whose join never ran (its step failed between the two). Outside
    // capture, `compute` first waits for that work, so nothing overlaps it
    // unjoined; a capturing stream cannot wait on work outside its capture.
    if (platform_.capture_status(compute) == CaptureStatus::kNone &&
        platform_.capture_status(stream_) == CaptureStatus::kNone) {
      platform_.record_event(join_event_, stream_);
      platform_.stream_wait_event(compute, join_event_);
    }
    forked_ = false;
  }
  platform_.record_event(fork_event_, compute);
  platform_.stream_wait_event(stream_, fork_event_);
  forked_ = true;
  forked_from_ = compute;
  ++fork_count_;
}

void CommunicationStream::join_into(StreamHandle compute) {
  if (!forked_) return;
  GROVE_CHECK(compute == forked_from_, device_.str(),
              ": collective_join on a different stream than the collectives forked from; "
              "join on the stream that ran the backward (Note [Communication stream])");
  platform_.record_event(join_event_, stream_);
  platform_.stream_wait_event(compute, join_event_);
  forked_ = false;
}

CommunicationStream& communication_stream(Device device) {
  thread_local std::map<Device, std::unique_ptr<CommunicationStream>> streams;
  std::unique_ptr<CommunicationStream>& slot = streams[device];
  if (slot == nullptr) slot = std::make_unique<CommunicationStream>(device);
  return *slot;
}

}  // namespace grove::runtime::collectives
