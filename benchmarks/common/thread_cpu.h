// CPU time of this process's threads by thread id and name
// (/proc/self/task/*/schedstat): what the serving benchmarks use to give the
// CPU per answered request of the server's threads (Note [CPU per request],
// benchmarks/serve_http/serve_http.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace grove::benchmarks {

// Each thread's name and CPU nanoseconds so far, by thread id.
using ThreadCpu = std::map<int, std::pair<std::string, uint64_t>>;
ThreadCpu thread_cpu_ns();

// A thread's CPU split into user and kernel time (clock ticks of
// /proc/self/task/*/stat, sysconf(_SC_CLK_TCK) a second) and its voluntary
// context switches (/proc/self/task/*/status): where its CPU went, which
// the nanoseconds above do not say.
struct ThreadTimes {
  std::string name;
  uint64_t user_ticks = 0;
  uint64_t kernel_ticks = 0;
  uint64_t voluntary_switches = 0;
};
std::map<int, ThreadTimes> thread_times();

// CPU nanoseconds between two snapshots of the threads named `name` (a thread
// not in `before` counts from zero; one gone from `after` counts nothing).
double cpu_ns_between(const ThreadCpu& before, const ThreadCpu& after, const std::string& name);

// The threads of one name between two snapshots: how many ran, their CPU
// nanoseconds together, and the busiest one's (a thread that is alone in its
// stage of a pipeline limits it once its CPU nears the wall time).
struct ThreadGroupCpu {
  std::string name;
  int threads = 0;
  double ns = 0;
  double busiest_ns = 0;
};
// Every name's group, most CPU first (threads that used none left out).
std::vector<ThreadGroupCpu> cpu_by_name(const ThreadCpu& before, const ThreadCpu& after);

}  // namespace grove::benchmarks
