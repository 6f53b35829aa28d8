#include "runtime/collectives/host_communicator.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/collectives/held_locks.h"
#include "runtime/collectives/host_reduction.h"
#include "runtime/device_context.h"

namespace grove::runtime::collectives {

// The meeting point of ranks that are threads of one process.
class HostRendezvous : public HostGroup {
 public:
  HostRendezvous(std::string group_id, int world_size, std::chrono::milliseconds timeout)
      : group_id_(std::move(group_id)),
        world_size_(world_size),
        timeout_(timeout),
        staged_(static_cast<size_t>(world_size)),
        layouts_(static_cast<size_t>(world_size)),
        arrived_(static_cast<size_t>(world_size), false) {}

  std::string name() const override { return group_id_; }
  int world_size() const override { return world_size_; }

  void all_reduce(int rank, const std::vector<Buffer>& buffers, ReduceOp op) override;

 private:
  // Waits until every rank has called barrier() for the current phase.
  void barrier(std::unique_lock<std::mutex>& lock, int rank, const char* phase);
  void check_layouts(int rank) const;

  const std::string group_id_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Per rank: the bytes and layouts of its buffers in the current collective.
  std::vector<std::vector<std::vector<uint8_t>>> staged_;
  std::vector<std::vector<Buffer>> layouts_;
  std::vector<bool> arrived_;
  int arrived_count_ = 0;
  int64_t barrier_generation_ = 0;
  int64_t collectives_ = 0;  // completed collectives of rank 0's count, for messages
  std::string failure_;      // set once a rank timed out: the group is unusable
};

void HostRendezvous::barrier(std::unique_lock<std::mutex>& lock, int rank, const char* phase) {
  GROVE_CHECK_AS(CommunicationError, failure_.empty(), failure_);
  arrived_[static_cast<size_t>(rank)] = true;
  if (++arrived_count_ == world_size_) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++barrier_generation_;
    changed_.notify_all();
    return;
  }
  const int64_t generation = barrier_generation_;
  bool met;
  {
    // Note [Waiting under the capture lock].
    lock.unlock();
    ReleaseHeldLocks released;
    lock.lock();
    met = changed_.wait_for(lock, timeout_,
                            [&] { return barrier_generation_ != generation || !failure_.empty(); });
    // Give the mutex back before the held locks are taken again (lock order).
    lock.unlock();
  }
  lock.lock();
  GROVE_CHECK_AS(CommunicationError, failure_.empty(), failure_);
  if (!met) {
    std::string missing;
    for (int r = 0; r < world_size_; ++r) {
      if (!arrived_[static_cast<size_t>(r)]) missing += str_cat(missing.empty() ? "" : ", ", r);
    }
    failure_ = str_cat("all_reduce of group '", group_id_, "' (world size ", world_size_,
                       "): rank ", rank, " waited ", timeout_.count(), " ms at collective #",
                       collectives_ + 1, " (", phase, ") for rank(s) ", missing,
                       ", which never arrived. Every rank must run the same steps; check that "
                       "all ",
                       world_size_,
                       " ranks started and none failed or stopped early (raise the timeout "
                       "with GROVE_COLLECTIVE_TIMEOUT_MS if a rank is merely slow)");
    changed_.notify_all();
    throw CommunicationError(failure_);
  }
}

void HostRendezvous::check_layouts(int rank) const {
  for (int r = 0; r < world_size_; ++r) {
    check_same_layouts(group_id_, rank, layouts_[static_cast<size_t>(rank)], r,
                       layouts_[static_cast<size_t>(r)]);
  }
}

void HostRendezvous::all_reduce(int rank, const std::vector<Buffer>& buffers, ReduceOp op) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Stage this rank's contribution; nobody reads it before the first barrier.
  auto& staged = staged_[static_cast<size_t>(rank)];
  staged.resize(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    const auto* bytes = static_cast<const uint8_t*>(buffers[b].data);
    staged[b].assign(bytes, bytes + buffers[b].count * dtype_size(buffers[b].dtype));
  }
  layouts_[static_cast<size_t>(rank)] = buffers;
  barrier(lock, rank, "waiting for every rank's contribution");
  check_layouts(rank);
  // Each rank writes only its own buffers from the staged copies.
  for (size_t b = 0; b < buffers.size(); ++b) {
    std::vector<const uint8_t*> sources;
    for (int r = 0; r < world_size_; ++r) {
      sources.push_back(staged_[static_cast<size_t>(r)][b].data());
    }
    reduce_in_rank_order(sources, static_cast<uint8_t*>(buffers[b].data), buffers[b].count,
                         buffers[b].dtype, op);
  }
  // Nobody may stage the next collective before every rank has read this one.
  barrier(lock, rank, "waiting for every rank to finish reading");
  if (rank == 0) ++collectives_;
}

namespace {

struct RendezvousTable {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<HostRendezvous>> groups;
};

RendezvousTable& rendezvous_table() {
  static RendezvousTable* table = new RendezvousTable();
  return *table;
}

// The host kernel: args are [communicator, op, buffer count, (data, count, dtype)...].
void host_all_reduce_kernel(const LaunchDims*, const uint64_t* args) {
  auto* communicator = reinterpret_cast<HostCommunicator*>(args[0]);
  auto op = static_cast<ReduceOp>(args[1]);
  std::vector<Buffer> buffers(static_cast<size_t>(args[2]));
  for (size_t b = 0; b < buffers.size(); ++b) {
    const uint64_t* at = args + 3 + 3 * b;
    buffers[b] = Buffer{reinterpret_cast<void*>(at[0]), static_cast<int64_t>(at[1]),
                        static_cast<DType>(at[2])};
  }
  communicator->reduce_now(buffers, op);
}

KernelHandle host_kernel_handle(Device device) {
  KernelSource source;
  source.name = "grove_host_all_reduce";
  source.host_function = &host_all_reduce_kernel;
  return load_kernel_once(device, source);
}

}  // namespace

std::shared_ptr<HostGroup> host_rendezvous(const std::string& group_id, int world_size,
                                           std::chrono::milliseconds timeout) {
  GROVE_CHECK_AS(CommunicationError, world_size >= 1, "host group '", group_id,
                 "': world size must be at least 1, found ", world_size);
  RendezvousTable& table = rendezvous_table();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::shared_ptr<HostRendezvous> existing = table.groups[group_id].lock();
  if (existing != nullptr) {
    GROVE_CHECK_AS(CommunicationError, existing->world_size() == world_size, "host group '",
                   group_id, "' has world size ", existing->world_size(),
                   " but a rank joined it with world size ", world_size,
                   "; every rank must pass the same GROVE_WORLD_SIZE");
    return existing;
  }
  auto created = std::make_shared<HostRendezvous>(group_id, world_size, timeout);
  table.groups[group_id] = created;
  return created;
}

HostCommunicator::HostCommunicator(std::shared_ptr<HostGroup> group, int rank, Device device)
    : group_(std::move(group)), rank_(rank), device_(device) {
  GROVE_CHECK_AS(CommunicationError, group_ != nullptr, "HostCommunicator needs a group");
  GROVE_CHECK_AS(CommunicationError, rank >= 0 && rank < group_->world_size(), "host group '",
                 group_->name(), "': rank ", rank, " is outside [0, ", group_->world_size(), ")");
  GROVE_CHECK_AS(DeviceError, !device.is_cuda(),
                 "the host communicator serves sim and cpu "
                 "devices; ",
                 device.str(), " needs the NCCL communicator");
}

HostCommunicator::~HostCommunicator() = default;

int HostCommunicator::world_size() const { return group_->world_size(); }

void HostCommunicator::all_reduce(const std::vector<Buffer>& buffers, ReduceOp op,
                                  StreamHandle stream) {
  KernelArgs args;
  args.add_pointer(this);
  args.add_i64(static_cast<int64_t>(op));
  args.add_i64(static_cast<int64_t>(buffers.size()));
  for (const Buffer& buffer : buffers) {
    args.add_pointer(buffer.data);
    args.add_i64(buffer.count);
    args.add_i64(static_cast<int64_t>(buffer.dtype));
  }
  device_context(device_).platform().launch_kernel(host_kernel_handle(device_), LaunchDims{}, args,
                                                   stream);
}

void HostCommunicator::reduce_now(const std::vector<Buffer>& buffers, ReduceOp op) {
  check_reducible(buffers, op);
  group_->all_reduce(rank_, buffers, op);
}

}  // namespace grove::runtime::collectives
