// What both kinds of `grove serve` share (a batching server for MODEL.json,
// an LLM for a checkpoint directory, cli/serve_llm_command.cc): the HTTP
// flags and the handling of SIGTERM and SIGINT.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/arguments.h"
#include "serving/http_server.h"

namespace grove::cli {

// --host, --port, --max-body-bytes, ... as the spec of `grove serve` lists them.
serving::HttpConfig parse_http_flags(const ParsedFlags& args);

// Blocks SIGTERM and SIGINT in this thread and every thread it starts from
// now on, so that only a SignalWatcher receives them.
void block_stop_signals();

// Note [Signals during start-up]: SIGTERM and SIGINT are blocked in every
// thread from the start of serve_command (threads inherit the mask), and one
// watcher thread, started before anything that may take long (compiling and
// warming up the buckets, reading the weights), waits for them. Before the
// HTTP server exists a signal ends the process at once with status 0 and a
// line saying so: nothing was received, so nothing is lost (the process used
// to ignore the signal until it listened). Once serving, a signal stops the
// HTTP server, which drains (Note [Draining on stop]). Guarded by
// ServeFilesTest.test_sigterm_during_start_up_exits_before_listening
// (tests/serving/serve_files_test.py).
class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  // From now on a signal calls `stop` (which drains the fronts) instead of
  // ending the start-up.
  void serving(std::function<void()> stop);

 private:
  void watch();

  std::mutex mutex_;
  std::function<void()> stop_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace grove::cli
