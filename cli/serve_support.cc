#include "cli/serve_support.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

namespace grove::cli {

serving::HttpConfig parse_http_flags(const ParsedFlags& args) {
  serving::HttpConfig http;
  http.host = args.value("--host", "127.0.0.1");
  http.port = static_cast<int>(args.integer("--port", 8000, 0, 65535));
  http.max_body_bytes = static_cast<size_t>(
      args.integer("--max-body-bytes", int64_t{16} << 20, 64, int64_t{1} << 32));
  http.max_header_bytes = static_cast<size_t>(
      args.integer("--max-header-bytes", int64_t{16} << 10, 256, int64_t{1} << 24));
  http.max_headers = static_cast<size_t>(args.integer("--max-header-fields", 64, 8, 1 << 16));
  http.idle_timeout_ms = static_cast<int>(args.integer("--idle-timeout-ms", 5000, 1, 3600000));
  http.header_timeout_ms = static_cast<int>(args.integer("--header-timeout-ms", 10000, 1, 3600000));
  http.body_timeout_ms = static_cast<int>(args.integer("--body-timeout-ms", 30000, 1, 3600000));
  http.max_connections = static_cast<size_t>(args.integer("--max-connections", 32768, 1, 1 << 20));
  http.threads = static_cast<int>(args.integer("--http-threads", 0, 0, 4096));
  http.answer_relay = !args.has("--no-answer-relay");
  return http;
}

void block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

SignalWatcher::SignalWatcher() {
  thread_ = std::thread([this] { watch(); });
}

SignalWatcher::~SignalWatcher() {
  done_ = true;
  thread_.join();
}

void SignalWatcher::serving(std::function<void()> stop) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = std::move(stop);
}

void SignalWatcher::watch() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  const timespec tick{0, 100 * 1000 * 1000};
  while (!done_) {
    int signal = sigtimedwait(&set, nullptr, &tick);
    if (signal != SIGTERM && signal != SIGINT) continue;
    const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stop_) {
      std::printf(
          "received %s during start-up: exiting before serving (no request was "
          "received)\n",
          name);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(0);
    }
    std::printf("received %s: draining (every request received is answered)\n", name);
    std::fflush(stdout);
    stop_();
    return;
  }
}

}  // namespace grove::cli
