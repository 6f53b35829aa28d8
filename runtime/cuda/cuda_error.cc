#include "runtime/cuda/cuda_error.h"

namespace grove::runtime::cuda_detail {

bool is_capture_error(cudaError_t error) {
  switch (error) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}

std::string_view call_name(std::string_view call_text) {
  size_t paren = call_text.find('(');
  std::string_view name = call_text.substr(0, paren);
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  size_t scope = name.rfind("::");
  if (scope != std::string_view::npos) name.remove_prefix(scope + 2);
  return name;
}

void throw_cuda_error(cudaError_t error, std::string_view call_text, const std::string& doing) {
  cudaGetLastError();  // the failure is reported here; later calls must not see it again
  std::string message = str_cat(call_name(call_text), " failed while ", doing, ": ",
                                cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  if (is_capture_error(error)) {
    throw CaptureViolation(
        str_cat(message,
                ". Stream capture forbids this call or was already invalidated; end the "
                "capture (the stream becomes usable again) and keep synchronizing, host "
                "copies and unpooled allocation out of captured code"));
  }
  if (error == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw DeviceError(message);
}

RelaxedCaptureModeGuard::RelaxedCaptureModeGuard() {
  GROVE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous_),
                   "switching this thread to the relaxed stream-capture mode");
}

RelaxedCaptureModeGuard::~RelaxedCaptureModeGuard() {
  // Restoring cannot fail for a mode that was valid a moment ago; nothing to report in a
  // destructor.
  cudaThreadExchangeStreamCaptureMode(&previous_);
}

}  // namespace grove::runtime::cuda_detail
