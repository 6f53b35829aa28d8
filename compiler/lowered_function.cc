#include "compiler/lowered_function.h"

namespace grove::compiler {

const char* capture_blocker_name(CaptureBlocker blocker) {
  switch (blocker) {
    case CaptureBlocker::kNone:
      return "capturable";
    case CaptureBlocker::kNeedsHostSync:
      return "needs a host sync";
    case CaptureBlocker::kHostOnly:
      return "host-only op";
    case CaptureBlocker::kCpuTensors:
      return "cpu tensors";
    case CaptureBlocker::kSeveralDevices:
      return "several devices";
  }
  return "?";
}

}  // namespace grove::compiler
