// The compile profile: where a compile's time went (Note [Compile profile]).
// Code generation, the driver's JIT of each PTX module, GEMM tuning and
// library setup record timed events here while the profile is on; a benchmark
// (or GROVE_COMPILE_PROFILE=1) takes them and prints a breakdown.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace grove::runtime {

struct CompileEvent {
  std::string category;  // "ptx", "jit", "jit wait", "tuning", "blas setup", ...
  std::string name;      // the kernel, module or GEMM shape
  size_t bytes = 0;      // PTX bytes, where the event compiles some
  double ms = 0;
};

// Whether events are recorded: set_compile_profile(true) or GROVE_COMPILE_PROFILE=1.
bool compile_profile_enabled();
void set_compile_profile(bool enabled);

// Thread-safe; does nothing while the profile is off.
void record_compile_event(CompileEvent event);

// The events recorded since the last take, in the order they ended.
std::vector<CompileEvent> take_compile_events();

// Records one event of `category` and `name` when it goes out of scope.
class CompileEventTimer {
 public:
  CompileEventTimer(std::string category, std::string name, size_t bytes = 0);
  ~CompileEventTimer();
  CompileEventTimer(const CompileEventTimer&) = delete;
  CompileEventTimer& operator=(const CompileEventTimer&) = delete;

 private:
  bool enabled_;
  CompileEvent event_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace grove::runtime
