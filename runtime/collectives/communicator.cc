#include "runtime/collectives/communicator.h"

#include <map>
#include <mutex>
#include <vector>

namespace grove::runtime::collectives {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<Device, std::shared_ptr<Communicator>> by_device;
  // Replaced or removed communicators that graphs captured, never destroyed
  // (Note [Communicators captured by graphs are never destroyed]).
  std::vector<std::shared_ptr<Communicator>> captured_and_replaced;
};

Registry& registry() {
  static Registry* instance = new Registry();  // outlives every rank thread
  return *instance;
}

}  // namespace

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "mean"; }

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean") return ReduceOp::kMean;
  throw Error(str_cat("reduce op '", name, "' is not known; use \"sum\" or \"mean\""));
}

std::vector<Buffer> coalesce_adjacent(const std::vector<Buffer>& buffers) {
  // Note [Adjacent buffers reduce as one].
  std::vector<Buffer> merged;
  for (const Buffer& buffer : buffers) {
    if (!merged.empty()) {
      Buffer& last = merged.back();
      const auto* end = static_cast<const char*>(last.data) +
                        static_cast<size_t>(last.count) * dtype_size(last.dtype);
      if (last.dtype == buffer.dtype && buffer.data != nullptr && end == buffer.data) {
        last.count += buffer.count;
        continue;
      }
    }
    merged.push_back(buffer);
  }
  return merged;
}

Communicator& communicator_for(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.by_device.find(device);
  GROVE_CHECK_AS(CommunicationError, found != r.by_device.end() && found->second != nullptr,
                 "no communicator for ", device.str(),
                 ": a collective (all_reduce) needs the rank that owns ", device.str(),
                 " to join a group first (collectives::join_local_group or "
                 "collectives::join_group)");
  return *found->second;
}

bool has_communicator(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.by_device.find(device);
  return found != r.by_device.end() && found->second != nullptr;
}

void set_communicator(Device device, std::shared_ptr<Communicator> communicator) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto current = r.by_device.find(device);
  if (current != r.by_device.end() && current->second != nullptr &&
      current->second != communicator && current->second->captured()) {
    r.captured_and_replaced.push_back(current->second);
  }
  if (communicator == nullptr) {
    r.by_device.erase(device);
  } else {
    GROVE_CHECK_AS(CommunicationError, communicator->device() == device, "set_communicator: a ",
                   communicator->kind(), " communicator of ", communicator->device().str(),
                   " cannot serve ", device.str());
    r.by_device[device] = std::move(communicator);
  }
}

}  // namespace grove::runtime::collectives
