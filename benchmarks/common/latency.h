// The latency summaries of cli/common/latency.h, under the benchmarks' namespace.
#pragma once

#include "cli/common/latency.h"

namespace grove::benchmarks {

using cli::LatencySummary;
using cli::percentile;
using cli::Stopwatch;
using cli::summarize;

}  // namespace grove::benchmarks
