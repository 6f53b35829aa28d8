#include "cli/progress.h"

#include <cstdio>
#include <exception>

namespace grove::cli {

namespace {
constexpr size_t kLabelWidth = 56;
}

Phase::Phase(std::string label)
    : label_(std::move(label)), uncaught_at_start_(std::uncaught_exceptions()) {
  std::string dots = label_.size() + 2 < kLabelWidth
                         ? " " + std::string(kLabelWidth - label_.size() - 2, '.')
                         : std::string();
  std::printf("  %s%s ", label_.c_str(), dots.c_str());
  std::fflush(stdout);
}

Phase::~Phase() {
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    std::printf("failed\n");
  } else {
    std::printf("%.2f s%s%s\n", watch_.elapsed_s(), note_.empty() ? "" : "  ", note_.c_str());
  }
  std::fflush(stdout);
}

}  // namespace grove::cli
