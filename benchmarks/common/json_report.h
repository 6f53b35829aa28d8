// The JSON reports of cli/common/json_report.h, under the benchmarks' namespace.
#pragma once

#include "benchmarks/common/latency.h"
#include "cli/common/json_report.h"

namespace grove::benchmarks {

using cli::latency_json;
using cli::report_header;
using cli::utc_date;
using cli::write_json_file;

}  // namespace grove::benchmarks
