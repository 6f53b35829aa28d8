#include "runtime/launch_clock.h"

namespace grove::runtime::launch_clock {
namespace {

struct Clock {
  bool running = false;
  int64_t nanoseconds = 0;
};

Clock& this_thread() {
  thread_local Clock clock;
  return clock;
}

}  // namespace

bool running() { return this_thread().running; }

void start() { this_thread() = Clock{true, 0}; }

int64_t stop() {
  Clock& clock = this_thread();
  clock.running = false;
  return clock.nanoseconds;
}

void add(int64_t nanoseconds) {
  Clock& clock = this_thread();
  if (clock.running) clock.nanoseconds += nanoseconds;
}

}  // namespace grove::runtime::launch_clock
