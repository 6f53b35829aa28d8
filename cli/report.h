// How the `grove` command presents measurements: tables for the terminal and
// JSON for --stats-json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/common/table.h"
#include "cli/measure.h"
#include "compiler/ir/program.h"

namespace grove::cli {

// ", batch 1, seq 32" (the program's bound dims), empty when it has none.
std::string dims_text(const compiler::ir::Program& program);

// Two columns (metric, value) for one measurement.
Table measurement_table(const Measurement& measurement, bool training);
// Two columns (metric, value) summarizing a tree's stats() snapshot.
Table tree_table(const nlohmann::json& stats);
// One row per backend, with each backend's latency relative to the first row.
Table comparison_table(const std::vector<Measurement>& measurements, bool training);

nlohmann::json measurement_json(const Measurement& measurement, bool training);

}  // namespace grove::cli
