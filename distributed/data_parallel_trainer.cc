#include "distributed/data_parallel_trainer.h"

#include "distributed/deferred_all_reduce.h"
#include "runtime/collectives/communicator.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::distributed {
namespace {

runtime::collectives::Communicator& communicator_of(const compiler::ir::Program& model) {
  const runtime::Device device = model.device();
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "DataParallelTrainer for '",
                 model.name(), "': device ", device.str(), " is not available here");
  return runtime::collectives::communicator_for(device);
}

// The `grad.<param>` buffers each bucket's gradients are copied into, in
// bucket order: the groups laid out back to back (Note [Gradient bucket in one buffer]).
training::StateGroups bucket_buffers(const compiler::ir::Program& backward,
                                     const GradientBuckets& buckets) {
  training::StateGroups groups;
  for (const std::vector<size_t>& bucket : buckets.outputs) {
    std::vector<std::string>& names = groups.emplace_back();
    for (size_t output : bucket) {
      const compiler::ir::Node& copy =
          backward.node(backward.value(backward.outputs()[output]).producer);
      if (copy.op != "copy_into") continue;
      const compiler::ir::Value& destination = backward.value(copy.operands.at(0));
      if (destination.is_persistent()) names.push_back(destination.name);
    }
  }
  return groups;
}

}  // namespace

AllReduceOptions data_parallel_all_reduce() {
  AllReduceOptions options;
  options.min_last_bucket_bytes = int64_t{64} << 10;
  return options;
}

DataParallelTrainer::DataParallelTrainer(const compiler::ir::Program& model,
                                         compiler::ir::ValueId loss,
                                         const DataParallelOptions& options)
    : rank_(communicator_of(model).rank()),
      world_size_(communicator_of(model).world_size()),
      trainer_(model, loss, with_all_reduce(model, options)) {}

DataParallelTrainer::~DataParallelTrainer() = default;
DataParallelTrainer::DataParallelTrainer(DataParallelTrainer&&) noexcept = default;
DataParallelTrainer& DataParallelTrainer::operator=(DataParallelTrainer&&) noexcept = default;

training::TrainerOptions DataParallelTrainer::with_all_reduce(const compiler::ir::Program& model,
                                                              const DataParallelOptions& options) {
  GROVE_CHECK(!options.trainer.compile_backward && !options.trainer.compile_optimizer,
              "DataParallelTrainer for '", model.name(),
              "': leave DataParallelOptions::trainer.compile_backward and compile_optimizer "
              "empty; the data-parallel trainer compiles the backward with its gradient "
              "all-reduces");
  training::TrainerOptions trainer = options.trainer;
  // Called while trainer_ is built, before this object can move.
  AllReduceOptions reduce = options.all_reduce;
  reduce.coalesce_adjacent = options.contiguous_buckets;
  // Note [Last buckets reduced in the optimizer step]: only with overlap.
  if (!reduce.overlap) reduce.deferred_last_buckets = 0;
  trainer.compile_backward = [this, all_reduce = reduce, name = model.name()](
                                 const compiler::ir::Program& backward,
                                 const training::StageCompiler& compile) {
    compiler::ir::Program reduced = add_gradient_all_reduce(backward, all_reduce, &buckets_);
    const training::StateGroups buffers = bucket_buffers(backward, buckets_);
    const training::StateGroups layout =
        all_reduce.coalesce_adjacent ? buffers : training::StateGroups{};
    // Note [Last buckets reduced in the optimizer step].
    deferred_buffers_.assign(buffers.end() - static_cast<std::ptrdiff_t>(buckets_.deferred),
                             buffers.end());
    compiler::backends::CompiledModel compiled = compile(reduced, layout);
    overlap_ = all_reduce.overlap;
    if (overlap_ && compiled.lowered().segments().size() > 1) {
      // Note [Communication stream]: a graph backend captures each segment on
      // its own, and a fork must be joined within the capture that made it; a
      // backward in several segments runs its all-reduces in line instead.
      log(LogLevel::kInfo,
          str_cat("DataParallelTrainer for '", name, "': the backward has ",
                  compiled.lowered().segments().size(),
                  " segments; gradient all-reduces run on the compute stream (no overlap)"));
      AllReduceOptions in_line = all_reduce;
      in_line.overlap = false;
      in_line.deferred_last_buckets = 0;
      compiled = compile(add_gradient_all_reduce(backward, in_line, &buckets_), layout);
      deferred_buffers_.clear();
      overlap_ = false;
    }
    return compiled;
  };
  trainer.compile_optimizer = [this, all_reduce = reduce, name = model.name()](
                                  const compiler::ir::Program& optimizer,
                                  const training::StageCompiler& compile) {
    if (deferred_buffers_.empty()) return compile(optimizer, {});
    // Note [Last buckets reduced in the optimizer step]; the buffers exist
    // already (laid out by the backward), so no layout is asked for.
    compiler::backends::CompiledModel compiled =
        compile(add_deferred_all_reduce(optimizer, deferred_buffers_, all_reduce), {});
    if (compiled.lowered().segments().size() > 1) {
      // Note [Communication stream]: a fork is joined within its capture.
      log(LogLevel::kInfo, str_cat("DataParallelTrainer for '", name, "': the optimizer step has ",
                                   compiled.lowered().segments().size(),
                                   " segments; its all-reduces run on the compute stream"));
      AllReduceOptions in_line = all_reduce;
      in_line.overlap = false;
      compiled = compile(add_deferred_all_reduce(optimizer, deferred_buffers_, in_line), {});
    }
    return compiled;
  };
  return trainer;
}

}  // namespace grove::distributed
