// DataParallelTrainer: one rank of data-parallel training. Each rank holds a
// full copy of the model (params start from the same initializers on every
// rank), runs the forward and backward on its shard of the batch, averages
// the gradients with the other ranks inside the backward (all_reduce nodes,
// Note [Gradient buckets]; by default on the communication stream, overlapping
// the rest of the backward: Note [Communication stream] in
// runtime/collectives/communication_stream.h; AllReduceOptions::overlap =
// false runs them in line), then applies the same optimizer update, so the
// params stay identical on every rank. It is the Trainer (trainer.h) with
// that backward; the stages are prepared with one execution backend, and with
// "cudagraphs" the forward, the backward (collectives included) and the
// optimizer step are captured in the calling thread's tree of the rank's
// device (Note [One thread per GPU] in runtime/cuda/nccl_communicator.h).
//
//   collectives::join_local_group(device, rank, world_size, "run", timeout);
//   DataParallelTrainer trainer(model_for(device), loss, {.trainer = {.backend = "cudagraphs"}});
//   for (...) trainer.step({shard_x, shard_y}, {.lr = 1e-3});
//
// With equal shards and a mean loss, N ranks reproduce single-device training
// on the concatenated batch (up to float rounding).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/distributed/gradient_all_reduce.h"
#include "compiler/training/trainer.h"

namespace grove::compiler::distributed {

struct DataParallelOptions {
  training::TrainerOptions trainer;
  AllReduceOptions all_reduce;
};

class DataParallelTrainer {
 public:
  // `model` runs on this rank's device, whose communicator must be installed
  // (runtime/collectives/setup.h); throws CommunicationError otherwise.
  DataParallelTrainer(const ir::Program& model, ir::ValueId loss,
                      const DataParallelOptions& options = {});
  ~DataParallelTrainer();
  DataParallelTrainer(DataParallelTrainer&&) noexcept;
  DataParallelTrainer& operator=(DataParallelTrainer&&) noexcept;

  // One step on this rank's shard (the model's `input` values in call order).
  // Returns this rank's loss (before the update) as a device scalar.
  runtime::Tensor step(const TensorList& inputs, const training::Hyperparameters& hyperparameters);
  // The first half of step(): runs the forward on this rank's shard and
  // returns the arguments of the backward program (for tools and tests that
  // run or capture lowered_backward() themselves); `loss` receives the loss.
  TensorList backward_arguments(const TensorList& inputs, runtime::Tensor* loss = nullptr);

  // Whether the gradient all-reduces overlap the backward on the
  // communication stream (AllReduceOptions::overlap, unless the backward
  // lowered into several segments: Note [Communication stream]).
  bool overlaps_communication() const { return overlap_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const runtime::Tensor& state(const std::string& name) const;
  std::vector<std::string> state_names() const;
  int64_t steps_taken() const { return steps_; }
  const GradientBuckets& buckets() const { return buckets_; }
  const ir::Program& backward_program() const { return backward_; }
  const lowering::LoweredProgram& lowered_backward() const;

 private:
  TensorList arguments(const ir::Program& program, const TensorList& inputs) const;

  autodiff::TrainingPrograms programs_;
  ir::Program backward_;  // programs_.backward with the gradient all-reduces
  GradientBuckets buckets_;
  training::OptimizerProgram optimizer_;
  std::string backend_;
  int rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<training::TrainerStage> forward_;
  std::unique_ptr<training::TrainerStage> backward_stage_;
  std::unique_ptr<training::TrainerStage> optimizer_step_;
  std::map<std::string, runtime::Tensor> state_;
  runtime::Tensor loss_grad_;
  int64_t steps_ = 0;
  bool overlap_ = false;
};

}  // namespace grove::compiler::distributed
