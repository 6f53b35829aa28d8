// What the host's cores did over a run, from /proc/stat and getrusage: how
// many were busy, split into user, system and interrupt time, and how many of
// them this process used, so that a slower run can be told apart as one
// whose own threads did more, or one beside something else that took the
// cores (Note [Where the tail arrived], tail_timeline.h).
#pragma once

#include <chrono>
#include <string>

namespace grove::benchmarks {

class HostLoad {
 public:
  // Starts counting now.
  HostLoad();
  // "host 11.2 of 32 cores busy (user 7.9, system 2.8, irq+softirq 0.5); serve_http 8.3"
  // over the time since construction.
  std::string describe() const;

  // This process's CPU seconds so far, every thread (user + system).
  static double process_cpu_s();

 private:
  struct Jiffies {
    double user = 0, system = 0, interrupts = 0, idle = 0;
  };
  static Jiffies read_jiffies();
  const Jiffies start_;
  const double process_start_s_;
  const std::chrono::steady_clock::time_point wall_start_;
};

}  // namespace grove::benchmarks
