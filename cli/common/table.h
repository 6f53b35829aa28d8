// A plain-text table with aligned columns, for benchmark and CLI output:
//
//   Table table({{"case"}, {"median us", Align::kRight}});
//   table.add_row({"mlp b=1", format_fixed(41.27, 1)});
//   std::fputs(table.render().c_str(), stdout);
//
//   case     median us
//   -------  ---------
//   mlp b=1       41.3
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace grove::cli {

enum class Align : uint8_t { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);

  // Throws grove::Error when the row's cell count differs from the column count.
  void add_row(std::vector<std::string> cells);
  size_t row_count() const { return rows_.size(); }
  // Header, a dashed rule, then the rows; columns separated by two spaces,
  // trailing spaces trimmed, every line ending in '\n'.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "41.3" (fixed-point with `decimals` digits).
std::string format_fixed(double value, int decimals);
// "1.50 MiB", "512 B", "3.00 GiB".
std::string format_bytes(uint64_t bytes);
// "3.07x" (a ratio with two decimals).
std::string format_ratio(double ratio);

}  // namespace grove::cli
