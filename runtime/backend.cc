#include "runtime/backend.h"

#include <cstring>

#include "runtime/error.h"

namespace grove::runtime {

KernelArgs& KernelArgs::add_f32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  slots.push_back(bits);
  return *this;
}

}  // namespace grove::runtime

namespace grove::runtime {

namespace {
[[noreturn]] void no_while_graphs(Backend& backend) {
  throw DeviceError(str_cat(backend.name(), " does not support conditional WHILE graph nodes; ",
                            "use the sim or cuda device (CUDA 12.4 or newer)"));
}
}  // namespace

GraphHandle Backend::create_graph() { no_while_graphs(*this); }
uint64_t Backend::create_while_condition(GraphHandle, bool) { no_while_graphs(*this); }
void Backend::add_while_node(GraphHandle, uint64_t, GraphHandle) { no_while_graphs(*this); }

}  // namespace grove::runtime
