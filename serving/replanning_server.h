// ReplanningServer serves through a batching Server and replaces it when the
// batch sizes the traffic makes call for other buckets (Note [Bucket
// planning]): a planner thread looks at the batches since the last plan,
// and when a bucket set with no more buckets and the same largest one would
// pad clearly less, it builds a Server with those buckets (compiled, weights
// loaded, graphs recorded, on its own worker threads while the old Server
// keeps answering), switches new requests to it, and drains and drops the
// old one with all its models and graphs.
//
//   ReplanningServer server(factory, config, {.period = std::chrono::seconds(30)});
//   HttpServer http(server, {.model_name = "mlp"});
//
// Note [Switching servers]
// A submit() holds a shared lock for as long as it queues its request into
// the current Server; the switch takes the lock exclusively to replace the
// pointer. So no request is ever queued into a Server that is shutting down
// (none is refused or dropped by a switch), requests queued in the old Server
// are run by it (ShutdownMode::kDrain) and their futures stay valid after it
// is gone, and no request waits for the new Server's compilation, which is
// done before the switch. The price is memory: both Servers hold their
// models and graphs until the old one has drained. stats() and the graph
// counters of backend_snapshots() add the retired Servers' counts to the
// current one's, so they never go back. Tests:
// ReplanningServer.* in tests/serving/replanning_server_test.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "serving/inference_service.h"
#include "serving/server.h"

namespace grove::serving {

struct ReplanConfig {
  // How often the planner looks at the batches since the last plan; zero:
  // never on its own (replan_now() only).
  std::chrono::milliseconds period{30000};
  // Fewest batches a plan is made from.
  uint64_t min_batches = 200;
  // Switch only when the plan pads at most this fraction of what the current
  // buckets padded on the same batches.
  double min_gain = 0.8;
  // Graph pool bytes the two Servers of a switch may hold together (the old
  // one's pool plus as much again for the new one, which has no more buckets
  // and the same largest); a switch that would pass it is not made. 0: none.
  int64_t memory_budget_bytes = 0;
  // Called on the planner thread with each switch: what changed, for logs.
  std::function<void(const std::string& message)> on_switch;
};

class ReplanningServer : public InferenceService {
 public:
  // Builds the first Server with config.buckets (Server's errors).
  ReplanningServer(ProgramFactory model, ServerConfig config, ReplanConfig replan);
  // Stops the planner, then shuts the current Server down (kDrain).
  ~ReplanningServer() override;

  std::future<Response> submit(Request request) override;
  std::future<Response> submit_then(Request request, std::function<void()> on_ready) override;
  void submit_then_answer(CheckedRequest request, OnAnswer on_answer) override;
  std::future<Response> submit_then(CheckedRequest request,
                                    std::function<void()> on_ready) override;
  const ModelSignature& signature() const override { return signature_; }
  int64_t max_batch() const override { return config_.max_batch; }
  ServerStats stats() const override;
  size_t queue_size() const override;
  std::vector<WorkerSnapshot> backend_snapshots() const override;

  // The current buckets.
  std::vector<int64_t> buckets() const;
  // Plans from the batches since the last plan and switches when the plan is
  // worth it (Note [Bucket planning], [Switching servers]); returns whether
  // it switched. The planner thread calls it every period; tests call it.
  bool replan_now();
  // Servers replaced so far.
  uint64_t switches() const;
  void shutdown(ShutdownMode mode = ShutdownMode::kDrain);
  // The current Server's worker reports.
  std::vector<WorkerReport> worker_reports() const;

 private:
  void planner_main();
  std::shared_ptr<Server> current() const;

  const ProgramFactory model_;
  const ServerConfig config_;
  const ReplanConfig replan_;
  ModelSignature signature_;
  mutable std::shared_mutex switch_mutex_;  // Note [Switching servers]
  std::shared_ptr<Server> server_;
  mutable std::mutex state_mutex_;  // the fields below
  ServerStats retired_;             // counters of the Servers replaced
  // Graph counters of the Servers replaced, by device, added to the current
  // Server's in backend_snapshots() so /metrics counters never go back.
  std::map<std::string, runtime::TreeCounters> retired_tree_;
  std::map<int64_t, uint64_t> planned_at_;  // batches_by_rows when the last plan was made
  uint64_t switches_ = 0;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::mutex replan_mutex_;  // one replan at a time
  std::thread planner_;
};

}  // namespace grove::serving
