#include "cli/progress.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli/work_estimate.h"

namespace grove::cli {

namespace {
constexpr size_t kLabelWidth = 56;
}

double first_progress_s() {
  static const double seconds = [] {
    const char* text = std::getenv("GROVE_PROGRESS_AFTER_S");
    if (text == nullptr || *text == '\0') return kFirstProgressS;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    return end != nullptr && *end == '\0' && value >= 0 ? value : kFirstProgressS;
  }();
  return seconds;
}

Phase::Phase(std::string label)
    : label_(std::move(label)),
      uncaught_at_start_(std::uncaught_exceptions()),
      next_progress_s_(first_progress_s()) {
  print_label();
  std::fflush(stdout);
}

void Phase::print_label() const {
  std::string dots = label_.size() + 2 < kLabelWidth
                         ? " " + std::string(kLabelWidth - label_.size() - 2, '.')
                         : std::string();
  std::printf("  %s%s ", label_.c_str(), dots.c_str());
}

void Phase::progress(int64_t done, int64_t total, const char* unit) {
  const double elapsed = watch_.elapsed_s();
  if (elapsed < next_progress_s_ || done <= 0 || done >= total) return;
  next_progress_s_ = elapsed + kProgressEveryS;
  const double left = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
  std::printf("\n    %lld/%lld %s, %s, about %s left", static_cast<long long>(done),
              static_cast<long long>(total), unit, format_duration(elapsed).c_str(),
              format_duration(left).c_str());
  progress_printed_ = true;
  std::fflush(stdout);
}

Phase::~Phase() {
  if (progress_printed_) {
    // The label again, so the phase's time stands next to its name.
    std::printf("\n");
    print_label();
  }
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    std::printf("failed\n");
  } else {
    std::printf("%.2f s%s%s\n", watch_.elapsed_s(), note_.empty() ? "" : "  ", note_.c_str());
  }
  std::fflush(stdout);
}

}  // namespace grove::cli
