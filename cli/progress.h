// Progress lines for phases that may take a while: the label is printed (and
// flushed) when the phase starts, the elapsed time when it ends, so a slow
// JIT compile on `sim` shows what grove is doing. A phase of many calls also
// reports how far it got once it has run for kFirstProgressS seconds
// (GROVE_PROGRESS_AFTER_S overrides it), then every kProgressEveryS seconds:
// calls done of total, elapsed, time left.
//
//   { Phase phase("compile gpt4x256 (eager)"); model = compile(...); }
//   -> "  compile gpt4x256 (eager) ................ 1.92 s"
//   { Phase phase("warm up (3 calls) mlp (eager)");
//     for (i...) { call(); phase.progress(i + 1, 3, "calls"); } }
//   -> "  warm up (3 calls) mlp (eager) ............"
//      "    1/3 calls, 4.1 s, about 8 s left"
//      "  warm up (3 calls) mlp (eager) ............ 12.30 s"
#pragma once

#include <cstdint>
#include <string>

#include "cli/common/latency.h"

namespace grove::cli {

constexpr double kFirstProgressS = 2;
constexpr double kProgressEveryS = 5;
// kFirstProgressS, or GROVE_PROGRESS_AFTER_S when set (a number >= 0), so that
// a test sees the progress lines whatever the machine's speed.
double first_progress_s();

class Phase {
 public:
  explicit Phase(std::string label);
  ~Phase();  // prints the elapsed time (or "failed" when unwinding)
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  // Appended after the elapsed time: "1.92 s (JIT 1.80 s)".
  void set_note(std::string note) { note_ = std::move(note); }
  // `done` of `total` units finished; prints a progress line when due.
  void progress(int64_t done, int64_t total, const char* unit);

 private:
  void print_label() const;

  std::string label_;
  std::string note_;
  int uncaught_at_start_;
  Stopwatch watch_;
  double next_progress_s_;
  bool progress_printed_ = false;
};

}  // namespace grove::cli
