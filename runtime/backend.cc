#include "runtime/backend.h"

#include <cstring>

namespace grove::runtime {

KernelArgs& KernelArgs::add_f32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  slots.push_back(bits);
  return *this;
}

}  // namespace grove::runtime
