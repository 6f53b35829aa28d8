#include "cli/work_estimate.h"

#include <cstdio>

#include "runtime/error.h"

namespace grove::cli {
namespace {

double elements(const compiler::ir::Program& program, compiler::ir::ValueId value) {
  int64_t numel = program.value(value).type.numel();
  return numel > 0 ? static_cast<double>(numel) : 0.0;  // dynamic shapes count nothing
}

std::string format_flops(double flops) {
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  size_t unit = 0;
  while (flops >= 1000 && unit + 1 < std::size(units)) {
    flops /= 1000;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.3g %s", flops, units[unit]);
  return text;
}

}  // namespace

std::string format_duration(double seconds) {
  char text[64];
  if (seconds < 90) {
    std::snprintf(text, sizeof(text), "%.0f s", seconds);
  } else if (seconds < 90 * 60) {
    std::snprintf(text, sizeof(text), "%.1f min", seconds / 60);
  } else if (seconds < 48 * 3600) {
    std::snprintf(text, sizeof(text), "%.1f h", seconds / 3600);
  } else {
    std::snprintf(text, sizeof(text), "%.0f days", seconds / 86400);
  }
  return text;
}

std::string WorkEstimate::str() const {
  return str_cat(format_flops(flops_per_call), " per call x ", calls, " calls: about ",
                 format_duration(seconds), " on sim");
}

WorkEstimate estimate_work(const compiler::ir::Program& program, int64_t calls, bool training) {
  WorkEstimate estimate;
  for (const compiler::ir::Node& node : program.nodes()) {
    double result = node.results.empty() ? 0.0 : elements(program, node.results[0]);
    if ((node.op == "matmul" || node.op == "linear") && !node.operands.empty()) {
      const runtime::Shape& a = program.value(node.operands[0]).type.shape;
      double inner = a.empty() || a.back() < 0 ? 1.0 : static_cast<double>(a.back());
      estimate.flops_per_call += 2.0 * result * inner;
    } else {
      // Pointwise work per result element; a reduction reads its whole operand.
      double operand = node.operands.empty() ? 0.0 : elements(program, node.operands[0]);
      estimate.flops_per_call += std::max(result, operand);
    }
  }
  if (training) estimate.flops_per_call *= 3;
  estimate.calls = calls;
  estimate.seconds = estimate.flops_per_call * static_cast<double>(calls) / kSimFlopsPerSecond;
  return estimate;
}

}  // namespace grove::cli
