#include "runtime/platform.h"

#include <cstdlib>
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
[[noreturn]] void no_while_graphs(Platform& platform) {
  throw DeviceError(str_cat(platform.name(), " does not support conditional WHILE graph nodes; ",
                            "use the sim or cuda device (CUDA 12.4 or newer)"));
}
}  // namespace

GraphHandle Platform::create_graph() { no_while_graphs(*this); }
uint64_t Platform::create_while_condition(GraphHandle, bool) { no_while_graphs(*this); }
void Platform::add_while_node(GraphHandle, uint64_t, GraphHandle) { no_while_graphs(*this); }

bool streamed_gemv_enabled(StreamedGemvs kernels) {
  const char* value = std::getenv("GROVE_STREAMED_GEMV");
  if (value == nullptr) return true;
  if (std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "blas") == 0) return kernels == StreamedGemvs::kBlas;
  if (std::strcmp(value, "norm") == 0) return kernels == StreamedGemvs::kNorm;
  return true;
}

bool weights_evict_first() {
  const char* value = std::getenv("GROVE_WEIGHTS_EVICT_FIRST");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

bool streamed_gemv_a_shared(int64_t columns) {
  const char* value = std::getenv("GROVE_GEMV_A_SHARED");
  if (value == nullptr) return false;
  return std::strcmp(value, "1") == 0 || (std::strcmp(value, "auto") == 0 && columns <= 4096);
}

int streamed_gemv_blocks_per_sm(int default_blocks) {
  const char* value = std::getenv("GROVE_STREAMED_GEMV_BLOCKS");
  if (value == nullptr || value[0] < '1' || value[0] > '4' || value[1] != '\0') {
    return default_blocks;
  }
  return value[0] - '0';
}

bool streamed_gemv_deep_slots(int64_t columns) {
  const char* value = std::getenv("GROVE_STREAMED_GEMV_SLOTS");
  if (value == nullptr) return false;
  return std::strcmp(value, "deep") == 0 || (std::strcmp(value, "auto") == 0 && columns <= 4096);
}

}  // namespace grove::runtime
