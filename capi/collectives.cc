// The C API's collective groups (grove_group_*): a process joins a
// data-parallel group whose id its caller hands to every rank (Note [Group ids
// handed out by the caller], runtime/collectives/setup.h), so a backward
// compiled with the "gradient_all_reduce" option reduces its gradients over
// the group inside its graph.
#include <chrono>
#include <cstring>
#include <string>

#include "capi/api_support.h"
#include "runtime/collectives/setup.h"

using grove::capi::require;
using grove::capi::run_api;
using grove::runtime::Device;
namespace collectives = grove::runtime::collectives;

namespace {

Device device_named(const char* device) {
  require(device != nullptr, "the device name is null; pass one such as \"cuda:0\" or \"sim:0\"");
  return Device::parse(device);
}

}  // namespace

extern "C" {

grove_status grove_group_new_id(const char* device, void* id, size_t capacity, size_t* size) {
  return run_api("grove_group_new_id", [&] {
    require(size != nullptr, "the output pointer `size` is null");
    const std::string made = collectives::new_group_id(device_named(device));
    *size = made.size();
    require(made.size() <= capacity, "the group id needs ", made.size(), " bytes; `capacity` is ",
            capacity, " (GROVE_GROUP_ID_MAX bytes always suffice)");
    require(id != nullptr || made.empty(), "the output pointer `id` is null");
    if (!made.empty()) std::memcpy(id, made.data(), made.size());
  });
}

grove_status grove_group_join(const char* device, int32_t rank, int32_t world_size, const void* id,
                              size_t size, int64_t timeout_ms) {
  return run_api("grove_group_join", [&] {
    const Device where = device_named(device);
    require(id != nullptr || size == 0, "the group id is null but `size` is ", size);
    require(timeout_ms > 0, "`timeout_ms` must be positive, found ", timeout_ms);
    collectives::join_group_by_id(where, rank, world_size,
                                  std::string(static_cast<const char*>(id), size),
                                  std::chrono::milliseconds(timeout_ms));
  });
}

grove_status grove_group_leave(const char* device) {
  return run_api("grove_group_leave", [&] { collectives::leave_group(device_named(device)); });
}

}  // extern "C"
