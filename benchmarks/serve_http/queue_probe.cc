#include "benchmarks/serve_http/queue_probe.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace grove::benchmarks {

QueueProbe::QueueProbe(const serving::Server& server) : server_(server) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "queue-probe");
    run();
  });
}

QueueProbe::~QueueProbe() { stop(); }

void QueueProbe::run() {
  const auto period = std::chrono::microseconds(500);
  double queued = 0, pending = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    const size_t in_queue = server_.queue_size();
    queued += static_cast<double>(in_queue);
    pending += static_cast<double>(server_.stats().pending());
    report_.max_queued = std::max<uint64_t>(report_.max_queued, in_queue);
    ++report_.samples;
    std::this_thread::sleep_for(period);
  }
  if (report_.samples > 0) {
    report_.mean_queued = queued / static_cast<double>(report_.samples);
    report_.mean_pending = pending / static_cast<double>(report_.samples);
  }
}

QueueProbe::Report QueueProbe::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  return report_;
}

}  // namespace grove::benchmarks
