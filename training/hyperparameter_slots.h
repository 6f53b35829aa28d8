// HyperparameterSlots: the optimizer's per-step scalars (learning rate,
// momentum, AdamW's step count, ...) as device tensors that keep their
// addresses, written in stream order.
//
// Note [Hyperparameters on the device]
// The optimizer program takes its hyper-parameters as scalar inputs, so a
// schedule needs no recompilation. Building fresh scalar tensors every step
// would copy each from pageable host memory and synchronize the stream, once
// per value: the host would wait for the step's forward and backward to finish
// before it could launch the optimizer, and a graph backend would see inputs
// at new addresses every step. Instead the values live in one device buffer
// allocated once (one f32 per hyper-parameter, each exposed as a scalar view),
// and write() refreshes it only when a value changed, with one asynchronous
// copy from pinned host memory on the current stream, ordered before the
// optimizer launch that reads it. The pinned source is a ring of kRing slots,
// each with an event recorded after its copy: a slot is rewritten only once
// its previous copy has run, so the host never waits for more than the copy
// made kRing writes earlier and never for the whole stream.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "compiler/lowered_function.h"
#include "runtime/device.h"
#include "runtime/pinned_host_buffer.h"
#include "runtime/platform.h"

namespace grove::training {

class HyperparameterSlots {
 public:
  static constexpr size_t kRing = 4;

  // `count` f32 scalars on `device`, zero until the first write().
  HyperparameterSlots(size_t count, runtime::Device device);
  // Waits for the copies still pending; the pinned slots are freed after.
  ~HyperparameterSlots();
  HyperparameterSlots(const HyperparameterSlots&) = delete;
  HyperparameterSlots& operator=(const HyperparameterSlots&) = delete;

  // Makes the scalars hold `values` (converted to f32) for work enqueued on the
  // device's current stream after this call; enqueues nothing when every value
  // equals the last one written. Throws when the count differs.
  const compiler::TensorList& write(const std::vector<double>& values);
  // The scalar tensors, in order; their addresses never change.
  const compiler::TensorList& tensors() const { return scalars_; }
  // Copies enqueued so far (one per write() that changed a value).
  uint64_t copies() const { return copies_; }

 private:
  struct Slot {
    runtime::PinnedHostBuffer host;  // `count` floats
    runtime::EventHandle copied{};
    bool pending = false;  // an event was recorded after this slot's last copy
  };

  runtime::Device device_;
  size_t count_;
  runtime::Tensor buffer_;        // [count] f32
  compiler::TensorList scalars_;  // scalar views of buffer_
  std::vector<float> last_;
  bool written_ = false;
  std::array<Slot, kRing> ring_{};
  size_t next_ = 0;
  uint64_t copies_ = 0;
};

}  // namespace grove::training
