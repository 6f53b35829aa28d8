// CPU time of this process's threads by thread id and name
// (/proc/self/task/*/schedstat): what the serving benchmarks use to give the
// CPU per answered request of the server's threads (Note [CPU per request],
// benchmarks/serve_http/serve_http.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace grove::benchmarks {

// Each thread's name and CPU nanoseconds so far, by thread id.
using ThreadCpu = std::map<int, std::pair<std::string, uint64_t>>;
ThreadCpu thread_cpu_ns();

// CPU nanoseconds between two snapshots of the threads named `name` (a thread
// not in `before` counts from zero; one gone from `after` counts nothing).
double cpu_ns_between(const ThreadCpu& before, const ThreadCpu& after, const std::string& name);

}  // namespace grove::benchmarks
