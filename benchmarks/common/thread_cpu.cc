#include "benchmarks/common/thread_cpu.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace grove::benchmarks {

ThreadCpu thread_cpu_ns() {
  ThreadCpu threads;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return threads;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream comm(task + "/comm"), schedstat(task + "/schedstat");
    std::string name;
    uint64_t ns = 0;
    if (std::getline(comm, name) && (schedstat >> ns)) {
      threads[std::atoi(entry->d_name)] = {name, ns};
    }
  }
  ::closedir(tasks);
  return threads;
}

double cpu_ns_between(const ThreadCpu& before, const ThreadCpu& after, const std::string& name) {
  double total = 0;
  for (const auto& [tid, thread] : after) {
    if (thread.first != name) continue;
    const auto earlier = before.find(tid);
    const uint64_t from =
        earlier != before.end() && earlier->second.first == name ? earlier->second.second : 0;
    total += static_cast<double>(thread.second - std::min(thread.second, from));
  }
  return total;
}

}  // namespace grove::benchmarks
