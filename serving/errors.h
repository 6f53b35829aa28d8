// The errors a batching server adds to grove's (runtime/error.h): a request
// the server will not take (queue full, server closed) and a request it took
// but gave up on (cancelled at shutdown).
#pragma once

#include "runtime/error.h"

namespace grove::serving {

// Back-pressure: submit() found the queue at its capacity. Nothing was
// queued; the caller may retry later, shed the request, or slow down.
class QueueFullError : public Error {
 public:
  using Error::Error;
};

// submit() after shutdown() began: the server takes no new requests.
class ServerClosedError : public Error {
 public:
  using Error::Error;
};

// A queued request that shutdown(ShutdownMode::kCancel) removed before it ran:
// its future holds this error instead of a response.
class RequestCancelledError : public Error {
 public:
  using Error::Error;
};

}  // namespace grove::serving
