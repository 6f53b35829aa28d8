// The launch clock: how long a thread's graph launches took, for benchmarks
// that split a replay's host time between the launch and the rest.
//
// Note [The launch clock]
// A replay's host time is the tree's dispatch (input checks, copies,
// outputs) and the platform's graph launch (cudaGraphLaunch on cuda). While
// a thread's clock runs, each launch_graph of the platform on that thread
// adds its duration; when it is stopped (the default) a launch reads one
// thread-local flag and nothing else. grove_model_time_runs_split (capi)
// starts it around its calls, so a benchmark learns both parts of the same
// calls (benchmarks/door_split.py, issue 33 at batch 1).
// Test: LaunchClock.CountsOnlyWhileRunningAndOnlyItsThread (tests/runtime).
#pragma once

#include <cstdint>

namespace grove::runtime::launch_clock {

// Whether this thread's clock runs.
bool running();
// Zeroes this thread's clock and starts it.
void start();
// Stops this thread's clock; the nanoseconds added since start().
int64_t stop();
// Adds a launch's nanoseconds to this thread's clock (platforms, while it runs).
void add(int64_t nanoseconds);

}  // namespace grove::runtime::launch_clock
