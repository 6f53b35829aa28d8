// The aligned text tables of cli/common/table.h, under the benchmarks' namespace.
#pragma once

#include "cli/common/table.h"

namespace grove::benchmarks {

using cli::Align;
using cli::Column;
using cli::format_bytes;
using cli::format_fixed;
using cli::format_ratio;
using cli::Table;

}  // namespace grove::benchmarks
