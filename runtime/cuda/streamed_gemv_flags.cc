#include "runtime/cuda/streamed_gemv_flags.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace grove::runtime::streamed_gemv_flags {
namespace {

// Whether `name` is "1", or the kind's own value ("blas" or "norm").
bool set_for(const char* name, bool blas) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  return std::strcmp(value, "1") == 0 || std::strcmp(value, blas ? "blas" : "norm") == 0;
}

// On unless `name` is "0".
bool on_unless_zero(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

bool allow_next_first(bool blas) {
  const char* value = std::getenv("GROVE_GEMV_ALLOW_NEXT_FIRST");
  if (value == nullptr) return true;
  return set_for("GROVE_GEMV_ALLOW_NEXT_FIRST", blas);
}

bool residual_first() { return on_unless_zero("GROVE_GEMV_RESIDUAL_FIRST"); }

bool row_in_registers() { return on_unless_zero("GROVE_GEMV_ROW_IN_REGISTERS"); }

int64_t prefetch_column_bits() {
  const char* value = std::getenv("GROVE_GEMV_PREFETCH_COLUMNS");
  if (value == nullptr) return 0;
  const int64_t columns = std::clamp<int64_t>(std::atoll(value), 0, 255);
  return columns << kPrefetchColumnsShift;
}

}  // namespace grove::runtime::streamed_gemv_flags
