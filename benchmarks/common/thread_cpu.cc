#include "benchmarks/common/thread_cpu.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

std::map<int, ThreadTimes> thread_times() {
  std::map<int, ThreadTimes> threads;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return threads;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream stat_file(task + "/stat"), status_file(task + "/status");
    std::string stat, line;
    if (!std::getline(stat_file, stat)) continue;
    // "tid (name) state ..." : the name may hold spaces and parentheses, so
    // the fields are counted from the last ')'; utime and stime are the 14th
    // and 15th fields of the line, the 12th and 13th after the name.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    ThreadTimes times;
    times.name = stat.substr(open + 1, close - open - 1);
    std::istringstream fields(stat.substr(close + 1));
    std::string field;
    for (int i = 1; i <= 13 && fields >> field; ++i) {
      if (i == 12) times.user_ticks = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 13) times.kernel_ticks = std::strtoull(field.c_str(), nullptr, 10);
    }
    while (std::getline(status_file, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
        times.voluntary_switches = std::strtoull(line.c_str() + 24, nullptr, 10);
      }
    }
    threads[std::atoi(entry->d_name)] = std::move(times);
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

std::vector<ThreadGroupCpu> cpu_by_name(const ThreadCpu& before, const ThreadCpu& after) {
  std::map<std::string, ThreadGroupCpu> groups;
  for (const auto& [tid, thread] : after) {
    const auto earlier = before.find(tid);
    const uint64_t from = earlier != before.end() && earlier->second.first == thread.first
                              ? earlier->second.second
                              : 0;
    const double used = static_cast<double>(thread.second - std::min(thread.second, from));
    if (used <= 0) continue;
    ThreadGroupCpu& group = groups[thread.first];
    group.name = thread.first;
    group.threads += 1;
    group.ns += used;
    group.busiest_ns = std::max(group.busiest_ns, used);
  }
  std::vector<ThreadGroupCpu> sorted;
  for (auto& [name, group] : groups) sorted.push_back(std::move(group));
  std::sort(sorted.begin(), sorted.end(),
            [](const ThreadGroupCpu& a, const ThreadGroupCpu& b) { return a.ns > b.ns; });
  return sorted;
}

}  // namespace grove::benchmarks
