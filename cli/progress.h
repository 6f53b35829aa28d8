// Progress lines for phases that may take a while: the label is printed (and
// flushed) when the phase starts, the elapsed time when it ends, so a slow
// JIT compile on `sim` shows what grove is doing.
//
//   { Phase phase("compile gpt4x256 (eager)"); model = compile(...); }
//   -> "  compile gpt4x256 (eager) ................ 1.92 s"
#pragma once

#include <string>

#include "cli/common/latency.h"

namespace grove::cli {

class Phase {
 public:
  explicit Phase(std::string label);
  ~Phase();  // prints the elapsed time (or "failed" when unwinding)
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  // Appended after the elapsed time: "1.92 s (JIT 1.80 s)".
  void set_note(std::string note) { note_ = std::move(note); }

 private:
  std::string label_;
  std::string note_;
  int uncaught_at_start_;
  Stopwatch watch_;
};

}  // namespace grove::cli
