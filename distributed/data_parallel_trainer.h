// DataParallelTrainer: one rank of data-parallel training. Each rank holds a
// full copy of the model (params start from the same initializers on every
// rank), runs the forward and backward on its shard of the batch, averages
// the gradients with the other ranks inside the backward (all_reduce nodes,
// Note [Gradient buckets]; by default on the communication stream, overlapping
// the rest of the backward: Note [Communication stream] in
// runtime/collectives/communication_stream.h; AllReduceOptions::overlap =
// false runs them in line), then applies the same optimizer update, so the
// params stay identical on every rank. It is the Trainer (trainer.h) whose
// TrainerOptions::compile_backward adds the all-reduces to the backward; the
// stages share one execution backend, and with "cudagraphs" the forward, the
// backward (collectives included) and the optimizer step are captured in the
// calling thread's tree of the rank's device (Note [One thread per GPU] in
// runtime/cuda/nccl_communicator.h).
//
//   collectives::join_local_group(device, rank, world_size, "run", timeout);
//   DataParallelTrainer trainer(model_for(device), loss, {.trainer = {.backend = "cudagraphs"}});
//   for (...) trainer.step({shard_x, shard_y}, {.lr = 1e-3});
//
// With equal shards and a mean loss, N ranks reproduce single-device training
// on the concatenated batch (up to float rounding).
#pragma once

#include <string>
#include <vector>

#include "distributed/gradient_all_reduce.h"
#include "training/trainer.h"

namespace grove::distributed {

// The gradient all-reduce plan of data-parallel training: AllReduceOptions'
// defaults (which the door's backward keeps) plus what won on two GPUs
// (2xH200, session 23, same-process A/B on mlp16x512 b32; gpt4x256 b8 T32
// has no such bucket): a last bucket under 64 KiB joins the one before it
// (Note [Small last bucket]: 428.5/428.8 -> 417.3/417.2 us per step in r1,
// 429.6/431.1 -> 414.2/414.9 in r2). deferred_last_buckets stays 0 (it lost:
// Note [Last buckets reduced in the optimizer step]); with overlap off the
// trainer reduces every bucket in the backward whatever it says.
AllReduceOptions data_parallel_all_reduce();

struct DataParallelOptions {
  // compile_backward and compile_optimizer must be empty: the data-parallel trainer sets them.
  training::TrainerOptions trainer;
  AllReduceOptions all_reduce = data_parallel_all_reduce();
  // Lay each bucket's gradient buffers out back to back and reduce the bucket
  // as one buffer (Note [Gradient bucket in one buffer] in training/trainer.h);
  // false: one buffer per gradient, the bucket's all-reduces grouped.
  bool contiguous_buckets = true;
};

class DataParallelTrainer {
 public:
  // `model` runs on this rank's device, whose communicator must be installed
  // (runtime/collectives/setup.h); throws CommunicationError otherwise.
  DataParallelTrainer(const compiler::ir::Program& model, compiler::ir::ValueId loss,
                      const DataParallelOptions& options = {});
  ~DataParallelTrainer();
  DataParallelTrainer(DataParallelTrainer&&) noexcept;
  DataParallelTrainer& operator=(DataParallelTrainer&&) noexcept;

  // One step on this rank's shard (the model's `input` values in call order).
  // Returns this rank's loss (before the update) as a device scalar.
  runtime::Tensor step(const compiler::TensorList& inputs,
                       const training::Hyperparameters& hyperparameters) {
    return trainer_.step(inputs, hyperparameters);
  }
  // The first half of step(): runs the forward on this rank's shard and
  // returns the arguments of the backward program (for tools and tests that
  // run or capture lowered_backward() themselves); `loss` receives the loss.
  compiler::TensorList backward_arguments(const compiler::TensorList& inputs,
                                          runtime::Tensor* loss = nullptr) {
    return trainer_.backward_arguments(inputs, loss);
  }

  // Whether the gradient all-reduces overlap the backward on the
  // communication stream (AllReduceOptions::overlap, unless the backward
  // lowered into several segments: Note [Communication stream]).
  bool overlaps_communication() const { return overlap_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const runtime::Tensor& state(const std::string& name) const { return trainer_.state(name); }
  std::vector<std::string> state_names() const { return trainer_.state_names(); }
  int64_t steps_taken() const { return trainer_.steps_taken(); }
  const GradientBuckets& buckets() const { return buckets_; }
  const compiler::ir::Program& backward_program() const {
    return trainer_.backward_stage().program();
  }
  const compiler::lowering::LoweredProgram& lowered_backward() const {
    return trainer_.lowered_backward();
  }
  // The single-device trainer this rank runs (its stages, hyper-parameter
  // copies, lowered programs).
  const training::Trainer& trainer() const { return trainer_; }

  // The door to the execution backend (Trainer's of the same names).
  compiler::backends::BackendStats backend_stats() const { return trainer_.backend_stats(); }
  std::string backend_dot() const { return trainer_.backend_dot(); }
  void mark_step_begin() const { trainer_.mark_step_begin(); }
  void reset_backend() const { trainer_.reset_backend(); }

 private:
  training::TrainerOptions with_all_reduce(const compiler::ir::Program& model,
                                           const DataParallelOptions& options);

  int rank_ = 0;
  int world_size_ = 1;
  GradientBuckets buckets_;
  // The gradient buffers of the buckets the optimizer step reduces (Note
  // [Last buckets reduced in the optimizer step]), one list per bucket.
  training::StateGroups deferred_buffers_;
  bool overlap_ = false;
  training::Trainer trainer_;  // built last: its compile_backward fills the fields above
};

}  // namespace grove::distributed
