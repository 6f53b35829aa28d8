#include "cli/common/table.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace grove::cli {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  GROVE_CHECK(!columns_.empty(), "Table: a table needs at least one column");
}

void Table::add_row(std::vector<std::string> cells) {
  GROVE_CHECK(cells.size() == columns_.size(), "Table::add_row: expected ", columns_.size(),
              " cells (one per column), found ", cells.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].header.size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) text += "  ";
      std::string padding(widths[c] - cells[c].size(), ' ');
      text += columns_[c].align == Align::kRight ? padding + cells[c] : cells[c] + padding;
    }
    text.erase(text.find_last_not_of(' ') + 1);
    return text + "\n";
  };
  std::vector<std::string> headers, rules;
  for (size_t c = 0; c < columns_.size(); ++c) {
    headers.push_back(columns_[c].header);
    rules.emplace_back(widths[c], '-');
  }
  std::string text = line(headers) + line(rules);
  for (const auto& row : rows_) text += line(row);
  return text;
}

std::string format_fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return format_fixed(value, 2) + " " + kUnits[unit];
}

std::string format_ratio(double ratio) { return format_fixed(ratio, 2) + "x"; }

}  // namespace grove::cli
