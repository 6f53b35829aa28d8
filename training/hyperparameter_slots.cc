#include "training/hyperparameter_slots.h"

#include <cstring>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::training {

HyperparameterSlots::HyperparameterSlots(size_t count, runtime::Device device)
    : device_(device), count_(count), last_(count, 0.0f) {
  GROVE_CHECK(count > 0, "HyperparameterSlots: no hyper-parameters");
  std::vector<float> zeros(count, 0.0f);
  buffer_ = runtime::Tensor::from_vector(zeros, {static_cast<int64_t>(count)}, device);
  for (size_t i = 0; i < count; ++i) {
    auto at = static_cast<int64_t>(i);
    scalars_.push_back(buffer_.slice(0, at, at + 1).view({}));
  }
  runtime::Platform& platform = runtime::device_context(device).platform();
  try {
    for (Slot& slot : ring_) {
      slot.host = runtime::PinnedHostBuffer(device, count * sizeof(float));
      slot.copied = platform.create_event(/*enable_timing=*/false);
    }
  } catch (...) {
    for (Slot& slot : ring_) {
      if (slot.copied.impl != nullptr) platform.destroy_event(slot.copied);
    }
    throw;
  }
}

HyperparameterSlots::~HyperparameterSlots() {
  runtime::Platform& platform = runtime::device_context(device_).platform();
  for (Slot& slot : ring_) {
    // The copy reads the pinned slot when the stream reaches it.
    if (slot.pending) platform.synchronize_event(slot.copied);
    if (slot.copied.impl != nullptr) platform.destroy_event(slot.copied);
  }
}

const compiler::TensorList& HyperparameterSlots::write(const std::vector<double>& values) {
  GROVE_CHECK(values.size() == count_, "HyperparameterSlots: ", values.size(), " values for ",
              count_, " hyper-parameters");
  std::vector<float> next(values.begin(), values.end());
  if (written_ && next == last_) return scalars_;
  runtime::DeviceContext& context = runtime::device_context(device_);
  runtime::Platform& platform = context.platform();
  runtime::StreamHandle stream = context.current_stream();
  Slot& slot = ring_[next_];
  if (slot.pending) platform.synchronize_event(slot.copied);
  std::memcpy(slot.host.data(), next.data(), count_ * sizeof(float));
  platform.copy_async(buffer_.data_ptr(), slot.host.data(), count_ * sizeof(float),
                      runtime::CopyKind::kHostToDevice, stream);
  platform.record_event(slot.copied, stream);
  slot.pending = true;
  next_ = (next_ + 1) % kRing;
  last_ = std::move(next);
  written_ = true;
  ++copies_;
  return scalars_;
}

}  // namespace grove::training
