#include "benchmarks/serve_http/host_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/error.h"

namespace grove::benchmarks {

HostLoad::HostLoad()
    : start_(read_jiffies()),
      process_start_s_(process_cpu_s()),
      wall_start_(std::chrono::steady_clock::now()) {}

HostLoad::Jiffies HostLoad::read_jiffies() {
  // The first line: cpu user nice system idle iowait irq softirq steal ...
  std::ifstream stat("/proc/stat");
  std::string label;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  Jiffies jiffies;
  if (label != "cpu") return jiffies;
  jiffies.user = user + nice;
  jiffies.system = system;
  jiffies.interrupts = irq + softirq;
  jiffies.idle = idle + iowait + steal;
  return jiffies;
}

double HostLoad::process_cpu_s() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string HostLoad::describe() const {
  const Jiffies now = read_jiffies();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count();
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (wall_s <= 0 || tick <= 0) return "host load unknown";
  auto cores = [&](double jiffies) { return jiffies / tick / wall_s; };
  const double user = cores(now.user - start_.user);
  const double system = cores(now.system - start_.system);
  const double interrupts = cores(now.interrupts - start_.interrupts);
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << "host " << user + system + interrupts << " of " << std::thread::hardware_concurrency()
      << " cores busy (user " << user << ", system " << system << ", irq+softirq " << interrupts
      << "); serve_http " << (process_cpu_s() - process_start_s_) / wall_s;
  return out.str();
}

}  // namespace grove::benchmarks
