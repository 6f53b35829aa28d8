// serve_http: `grove serve`'s path end to end over loopback — HTTP parsing,
// KServe v2 JSON, batching, the model, the JSON answer — for "eager" against
// "cudagraphs" in one process, on mlp16x512 by default.
//
// For each max batch and backend one batching Server is built (every bucket
// compiled and warmed up) behind an HttpServer on a free loopback port. For
// each offered rate, --clients client threads (each with --connections
// keep-alive HTTP connections) send requests at Poisson arrival times, rate / clients each
// (open loop: a client that falls behind sends at once and the delay is
// charged to latency, which runs from a request's scheduled arrival to the
// moment its whole answer was read). A 503 (full queue) counts as rejected.
// Answered/s is 200 answers over max(window, last answer - window start).
//
// Each encoding is a run of its own: "json" sends and asks for the data as
// JSON numbers, "binary" in the KServe binary tensor data extension (raw
// little-endian bytes after an Inference-Header-Content-Length of JSON),
// "grpc" the protocol's gRPC form to grove's gRPC front (raw contents; one
// channel, with its own connection, per client; benchmarks/serve_http/
// grpc_load_client.h), its clients in child processes of 8 clients each
// (Note [gRPC clients apart from the server]). gRPC's client library costs
// more CPU per call than the HTTP client here, and shares the cores with the
// server.
//
// Runs at a --held-rates rate with a --held-backends backend are measured
// twice, once as above and once with N connections that never send a byte
// (--idle-connections) and M that trickle a request's header one byte per
// --trickle-ms (--slowloris-connections) held open against the same front
// (benchmarks/serve_http/connection_flood.h), and a table compares the two
// p99s: issue 35's goal, within 2x with 10,000 idle and 500 slowloris
// connections, which is what a run with no flags measures (every encoding,
// cudagraphs, at 32,000/s). Given --idle-connections or
// --slowloris-connections without --held-rates, every run is measured twice.
// A held rate that --rates lacks is run too (Note [Held rates run whatever
// --rates says]).
//
// The clients run in this process, on the server's cores, so they are kept
// cheap (Note [A client that costs little]).
//
// With --connections K each client keeps up to K requests in flight, one per
// connection (Note [Requests in flight per client]). The table gives what the
// clients managed to send within the window (sent/s, against offered/s) and
// the CPU per answered request of the front, the worker and the clients
// (Note [CPU per request]).
//
//   serve_http [--device auto|cuda|sim] [--model mlp16x512] [--rates 8000,32000,128000,256000]
//              [--max-batches 16,64] [--encodings json,binary] [--clients 8] [--connections 64]
//              [--grpc-clients 64] [--grpc-connections 4] [--duration-ms 1500] [--json FILE]
//              [--http-threads N] [--launch-after-wait]
//              [--idle-connections 10000 --slowloris-connections 500 --trickle-ms 1000]
//              [--held-repeats 3] [--trickle-groups 1] [--grpc-completion-queues N]
//              [--warmup-ms 200]
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/load_options.h"
#include "benchmarks/common/table.h"
#include "benchmarks/common/thread_cpu.h"
#include "benchmarks/serve_http/connection_flood.h"
#include "benchmarks/serve_http/grpc_client_process.h"
#include "benchmarks/serve_http/grpc_load_client.h"
#include "benchmarks/serve_http/host_load.h"
#include "benchmarks/serve_http/http_load_client.h"
#include "benchmarks/serve_http/load_loop.h"
#include "benchmarks/serve_http/queue_probe.h"
#include "benchmarks/serve_http/tail_timeline.h"
#include "runtime/device_context.h"
#include "serving/bucket_plan.h"
#include "serving/grpc_server.h"
#include "serving/http_server.h"
#include "serving/process_memory.h"
#include "serving/server.h"

namespace grove::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kName = "serve_http";

// The highest rate saturates cudagraphs too: at 128,000/s it answered all it
// was offered (session 15, H100), so its best throughput was the offered rate.
const LoadDefaults kLoad{.rates = {8000, 32000, 128000, 256000}, .duration_ms = 1500};

std::vector<FlagSpec> flag_table() {
  std::vector<FlagSpec> flags = load_flags(kLoad);
  flags.push_back({"--encodings", "E1,E2",
                   "json (numbers in JSON), binary (the binary tensor data extension) and/or "
                   "grpc (the gRPC front, raw contents); default json,binary,grpc"});
  flags.push_back({"--binary", "", "the binary encoding alone (--encodings binary)"});
  flags.push_back({"--clients", "N",
                   "HTTP client threads (default 8; Note [Load clients sized for a shared host])"});
  flags.push_back({"--connections", "K",
                   "keep-alive connections per HTTP client, each with at most one request in "
                   "flight (default 64, so that the clients are not the limit)"});
  flags.push_back({"--grpc-clients", "N",
                   "gRPC clients, in child processes of 8, each with one channel (default 64)"});
  flags.push_back({"--grpc-connections", "K",
                   "calls in flight at most on each gRPC client's channel (default 8; Note [Load "
                   "clients sized for a shared host])"});
  flags.push_back({"--http-threads", "N",
                   "threads of the HTTP front, each an event loop (default 0: one per core up to "
                   "16 cores, three quarters of the cores past that; Note [Load clients sized for "
                   "a shared host])"});
  flags.push_back({"--grpc-answer-threads", "N",
                   "threads of the gRPC front that write answers (GrpcConfig::answer_threads; "
                   "default 0: a quarter of the cores)"});
  flags.push_back({"--grpc-completion-queues", "N",
                   "ModelInfer through N completion queues of gRPC's async API, a thread each "
                   "(GrpcConfig::completion_queues; 0: the callback API; default: "
                   "GROVE_GRPC_COMPLETION_QUEUES, else a quarter of the cores, 2 to 16)"});
  flags.push_back({"--no-answer-relay", "",
                   "answers reach the HTTP loops from the request reaper's thread, which "
                   "delivers them, not through a thread of their own (Note [Answers handed on by "
                   "a relay])"});
  flags.push_back({"--launch-after-wait", "",
                   "a batch that falls due while the worker waits for the device runs before the "
                   "waited batch is answered (ServerConfig::launch_after_wait; Note [A batch due "
                   "after the wait runs before the answers])"});
  flags.push_back({"--idle-connections", "N",
                   "also measure the --held-rates runs with N connections held open that never "
                   "send (default 10000)"});
  flags.push_back({"--slowloris-connections", "N",
                   "... and N that trickle a request header, one byte per --trickle-ms "
                   "(default 500)"});
  flags.push_back({"--held-rates", "R1,R2|all",
                   "the offered rates measured with those connections held open, run for the held "
                   "backends even where --rates lacks them (default 32000; "
                   "all: every rate, the default when --idle-connections or "
                   "--slowloris-connections is given; none: no run)"});
  flags.push_back({"--held-backends", "B1,B2",
                   "the backends measured with connections held open (default cudagraphs; all: "
                   "every one, the default when --idle-connections or --slowloris-connections "
                   "is given)"});
  flags.push_back({"--trickle-ms", "MS", "a slowloris connection's pace (default 1000)"});
  flags.push_back({"--trickle-groups", "G",
                   "slowloris connections send in G groups spread over each --trickle-ms "
                   "(default 1: all at once)"});
  flags.push_back({"--warmup-ms", "MS",
                   "an unmeasured run of MS ms at the first rate before each server's first "
                   "measured run of each encoding (default 200; 0: none, as before; Note [A "
                   "process's first run is cold])"});
  flags.push_back({"--held-repeats", "N",
                   "each held rate is measured N times alone and N times held, alternately, "
                   "and judged on the median p99 of each (default 3; 1: once, as before; Note "
                   "[Held verdict from repeats])"});
  return flags;
}

const std::vector<FlagSpec> kFlags = flag_table();

struct Options : LoadOptions {
  std::vector<std::string> encodings = {"json", "binary", "grpc"};
  // Note [Load clients sized for a shared host]
  // The load clients run on the server's cores (HTTP in this process, gRPC in
  // child processes), so how they are arranged decides how much CPU is left
  // for the front. On the H100 host (16 cores; r1 of session 18, max batch
  // 64, cudagraphs, 320,000/s offered), 64 HTTP client threads of 4
  // connections answered 117,845 (JSON) and 189,410 (binary) requests/s;
  // 16 threads of 32 connections, 141,077 and 210,396; with the front on 8
  // event loops instead of 16, binary reached 250,211 (front CPU 27.8 us per
  // request, from 32.7) while JSON, whose front needs more, fell to 130,070;
  // in r2, 12 loops answered 147,303 and 246,814, 16 loops 162,847 and
  // 269,769. So the front keeps one loop per core. Session 19 (JSON at max
  // batch 64, cudagraphs): 8 client threads of 64 connections answered
  // 179,467/s against 169,685 with 16 of 32 (r1, H200) and, with the clients
  // waiting in epoll (Note [Answers waited for with epoll]), 175,350 and
  // 279,266 (binary) against 164,550-170,927 and 265,455-274,409 (r2, H100;
  // clients 14.6 us per answer from 16.0-16.7), while 8 front loops fell to
  // 138,627 (r1). So HTTP defaults to 8 clients x 64 connections (512 in
  // flight, as before). gRPC keeps 64 clients of 4 calls in flight: 16
  // clients of 16 answered 67,666/s where 64 of 4 answered 87,895.
  // On the 32-core H200 host of session 22 (max batch 64, cudagraphs, one
  // request each round) 32 loops, one per core, left too little beside the
  // 8 client threads, the worker, the request reaper and the relay: 24
  // loops answered 395,359 (JSON) and 520,855 (binary) a second where 32
  // answered 338,056-350,700 and 427,203-475,681 in four runs of the same
  // request (r2, 640,000/s offered), the loops 78% and 63% busy, and 16
  // loops 315,074 and 443,215 against 359,649 and 469,739 (r1). So past 16
  // cores the front gets three quarters of them (default_http_threads()).
  // gRPC's 64 clients of 4 calls held 256 calls in flight, half of HTTP's
  // 512: on that host (session 23 r1, max batch 64, 640,000/s offered) 8
  // calls each answered 186,454 calls/s against 162,984 and 145,611 with 4,
  // at 64.8 against 69.8-70.4 us of front CPU per call, so the clients' window
  // was part of gRPC's limit; gRPC now keeps 512 in flight too (64 x 8).
  // (r2, on a much busier host: 102,716 with 4 against 101,048 and 130,408.)
  int64_t clients = 8;
  int64_t connections = 64;  // per client (Note [Requests in flight per client])
  int64_t grpc_clients = 64;
  int64_t grpc_connections = 8;  // calls in flight per gRPC client
  int64_t http_threads = 0;
  int64_t grpc_answer_threads = 0;      // 0: GrpcConfig's default
  int64_t grpc_completion_queues = -1;  // -1: GrpcConfig's default (the environment)
  bool answer_relay = true;
  bool launch_after_wait = false;
  bool flood_given = false;  // --idle-connections or --slowloris-connections given
  int64_t idle_connections = 10000;
  int64_t slowloris_connections = 500;
  int64_t trickle_ms = 1000;
  int64_t trickle_groups = 1;
  int64_t held_repeats = 3;  // Note [Held verdict from repeats]
  int64_t warmup_ms = 200;
  std::optional<std::vector<double>> held_rates = std::vector<double>{32000};  // nullopt: all
  std::optional<std::vector<std::string>> held_backends =
      std::vector<std::string>{"cudagraphs"};  // nullopt: all
  // Note [Held rates run whatever --rates says]
  // A --held-rates rate is run for the held backends even where --rates does
  // not name it: once alone and once with the connections held open. Session
  // 17's final lease gave --rates 128000,256000 and so measured no held
  // connections at the default 32,000/s. Test: serve_http_smoke_test.sh
  // (held rows at a rate outside --rates).
  bool holds_connections() const {
    return idle_connections + slowloris_connections > 0 && (!held_rates || !held_rates->empty());
  }
  bool holds_backend(const std::string& backend) const {
    return !held_backends ||
           std::find(held_backends->begin(), held_backends->end(), backend) != held_backends->end();
  }
  // The offered rates `backend` runs: --rates, then any held rate they lack.
  std::vector<double> rates_for(const std::string& backend) const {
    std::vector<double> all = rates;
    if (idle_connections + slowloris_connections == 0 || !held_rates || !holds_backend(backend))
      return all;
    for (double rate : *held_rates) {
      if (std::find(all.begin(), all.end(), rate) == all.end()) all.push_back(rate);
    }
    return all;
  }
  // Whether the run of `backend` at `rate` is measured again with connections held open.
  bool holds_for(const std::string& backend, double rate) const {
    if (idle_connections + slowloris_connections == 0) return false;
    if (held_rates && std::find(held_rates->begin(), held_rates->end(), rate) == held_rates->end())
      return false;
    return holds_backend(backend);
  }
};

struct RunResult {
  int64_t max_batch = 0;
  std::string backend;
  std::string encoding;
  double offered_rate = 0;
  bool loaded = false;    // measured with the flood's connections held open
  uint64_t reopened = 0;  // flood connections the server closed during the run
  int64_t repeat = 0;     // which of --held-repeats (0 for a run measured once)
  // Note [Where the tail arrived]: the requests at or above the p99, the
  // host's late wake-ups, and the flood's trickle bursts in ms from the start.
  Clock::time_point start;  // the window's
  TailTimeline tail;
  std::string stalls;
  std::string host_load;    // the host's cores over the run (HostLoad)
  double flood_cpu_s = -1;  // the connection holder's CPU over the run, held runs
  std::vector<double> trickle_ms;
  uint64_t sent = 0, answered = 0, rejected = 0, errors = 0;
  double answered_rate = 0;
  double sent_rate = 0;  // requests sent over the window (what the clients could offer)
  // CPU per answered request (Note [CPU per request]), µs: the front's threads,
  // the batching worker's, the client threads'.
  double front_cpu_us = 0, worker_cpu_us = 0, client_cpu_us = 0;
  // The front's threads: the part of their CPU in user space (the rest in the
  // kernel) and their voluntary context switches per answer (Note [CPU per request]).
  double front_user_share = 0, front_switches_per_answer = 0;
  // Note [Where the front's time went]: CPU by thread name over the run's
  // wall time, and the server's queue as the probe saw it.
  std::vector<ThreadGroupCpu> cpu_groups;
  double cpu_wall_s = 0;
  QueueProbe::Report queue;
  std::optional<LatencySummary> latency;
  double mean_batch_rows = 0;
  // Where the worker's time went per batch, µs (ServerStats::worker_launch_ns...).
  double launch_us = 0, wait_us = 0, answer_us = 0;
  std::string first_error;  // what the first failed exchange met
  bool saturated() const { return rejected > 0 || answered_rate < 0.9 * offered_rate; }
};

// Note [CPU per request]
// Where the CPU goes per answered request, from each thread's time on a CPU
// (benchmarks/common/thread_cpu.h) over a run: the batching worker's
// (grove-worker), the front's (every other thread of this process that
// lives through the run: the HTTP loops, grove-http, or gRPC's own threads,
// the answer relay, and the worker's reaper, grove-reaper, which frees
// answered requests for it; the waiting main thread costs nothing), and the client threads' own
// (CLOCK_THREAD_CPUTIME_ID, in this process for HTTP, in the client
// processes for gRPC, where gRPC's client threads are not counted). The
// kernel's work for a socket write is charged to the writer, waking the
// reader included. The JSON gives the front's threads' user share of their
// CPU (the rest is the kernel's, at the clock tick's resolution) and their
// voluntary context switches per answer (a sleep each, waiting for work).

// gRPC clients per child process (Note [gRPC clients apart from the server]).
constexpr int64_t kGrpcClientsPerProcess = 8;

RunResult run_load(const serving::Server& server, int port, const std::string& encoding,
                   const std::vector<std::string>& messages,
                   const std::vector<inference::ModelInferRequest>& grpc_messages, double rate,
                   const Options& options, uint64_t seed) {
  RunResult result;
  result.max_batch = server.config().max_batch;
  result.backend = server.config().backend;
  result.encoding = encoding;
  result.offered_rate = rate;
  const serving::ServerStats before = server.stats();
  const ThreadCpu cpu_before = thread_cpu_ns();
  const Clock::time_point cpu_wall_before = Clock::now();
  const std::map<int, ThreadTimes> times_before = thread_times();
  const double window_s = static_cast<double>(options.duration_ms) * 1e-3;
  // Connected before the window opens, one at a time: a burst of connects
  // overflows the listen backlog (cpp-httplib's is 5), and a dropped SYN is
  // retried after a second, which the first requests' latency would carry.
  // gRPC: --connections calls in flight per client on its channel (Note [gRPC clients on one
  // thread]).
  const int64_t grpc_clients = options.grpc_clients;
  std::vector<std::vector<std::unique_ptr<HttpLoadConnection>>> connections;
  std::vector<std::unique_ptr<GrpcClientProcess>> processes;
  if (encoding == "grpc") {
    for (int64_t first = 0; first < grpc_clients; first += kGrpcClientsPerProcess) {
      processes.push_back(std::make_unique<GrpcClientProcess>(
          port, grpc_messages, std::min(kGrpcClientsPerProcess, grpc_clients - first),
          options.grpc_connections));
    }
  } else {
    connections.resize(static_cast<size_t>(options.clients));
    for (auto& client : connections) {
      for (int64_t k = 0; k < options.connections; ++k) {
        client.push_back(std::make_unique<HttpLoadConnection>(port));
        client.back()->open();
      }
    }
  }
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  StallProbe probe;                // Note [Where the tail arrived]
  QueueProbe queue_probe(server);  // Note [Where the front's time went]
  HostLoad host_load;
  result.start = start;
  std::vector<ClientTally> tallies(static_cast<size_t>(options.clients));
  if (encoding == "grpc") {
    for (size_t p = 0; p < processes.size(); ++p) {
      processes[p]->start({.start = start,
                           .window_s = window_s,
                           .rate = rate,
                           .clients = grpc_clients,
                           .seed = seed,
                           .first_client = static_cast<int64_t>(p) * kGrpcClientsPerProcess});
    }
    tallies.clear();
    for (auto& process : processes) {
      for (ClientTally& tally : process->finish()) tallies.push_back(std::move(tally));
    }
  } else {
    std::vector<std::thread> clients;
    for (int64_t c = 0; c < options.clients; ++c) {
      clients.emplace_back([&, c] {
        pthread_setname_np(pthread_self(), "load-client");
        tallies[static_cast<size_t>(c)] =
            drive_http_client(connections[static_cast<size_t>(c)], messages, start, window_s, rate,
                              options.clients, seed, c);
      });
    }
    for (std::thread& client : clients) client.join();
  }
  const int64_t expected_tallies = encoding == "grpc" ? grpc_clients : options.clients;
  if (static_cast<int64_t>(tallies.size()) != expected_tallies && result.first_error.empty()) {
    result.first_error = str_cat(expected_tallies - static_cast<int64_t>(tallies.size()),
                                 " clients sent no counts back");
    result.errors += 1;
  }
  result.stalls = describe(probe.stop(), start);
  result.queue = queue_probe.stop();
  result.host_load = host_load.describe();
  std::vector<double> latencies_us;
  std::vector<double> arrival_ms;  // empty unless every tally has its arrivals (HTTP)
  bool arrivals_known = true;
  Clock::time_point last_answer = start;
  uint64_t sent_in_window = 0;
  double client_cpu_s = 0;
  for (const ClientTally& tally : tallies) {
    sent_in_window += tally.sent_in_window;
    client_cpu_s += tally.cpu_s;
    latencies_us.insert(latencies_us.end(), tally.latencies_us.begin(), tally.latencies_us.end());
    arrivals_known = arrivals_known && tally.arrivals.size() == tally.latencies_us.size();
    for (const Clock::time_point arrival : tally.arrivals) {
      arrival_ms.push_back(std::chrono::duration<double, std::milli>(arrival - start).count());
    }
    result.sent += tally.sent;
    result.answered += tally.answered;
    result.rejected += tally.rejected;
    result.errors += tally.errors;
    if (result.first_error.empty()) result.first_error = tally.first_error;
    last_answer = std::max(last_answer, tally.last_answer);
  }
  const double span_s =
      std::max(window_s, std::chrono::duration<double>(last_answer - start).count());
  result.answered_rate = static_cast<double>(result.answered) / span_s;
  result.sent_rate = static_cast<double>(sent_in_window) / window_s;
  // Note [CPU per request].
  double front_ns = 0, worker_ns = 0;
  const ThreadCpu cpu_after = thread_cpu_ns();
  result.cpu_wall_s = std::chrono::duration<double>(Clock::now() - cpu_wall_before).count();
  result.cpu_groups = cpu_by_name(cpu_before, cpu_after);
  for (const auto& [tid, thread] : cpu_after) {
    const auto earlier = cpu_before.find(tid);
    const uint64_t before_ns = earlier != cpu_before.end() && earlier->second.first == thread.first
                                   ? earlier->second.second
                                   : 0;
    const double used = static_cast<double>(thread.second - std::min(thread.second, before_ns));
    if (thread.first == "grove-worker") {
      worker_ns += used;
    } else if (thread.first != "load-client" && thread.first != "stall-probe" &&
               thread.first != "queue-probe") {
      front_ns += used;
    }
  }
  uint64_t front_user = 0, front_kernel = 0, front_switches = 0;
  for (const auto& [tid, thread] : thread_times()) {
    if (thread.name == "grove-worker" || thread.name == "load-client" ||
        thread.name == "stall-probe" || thread.name == "queue-probe") {
      continue;
    }
    const auto earlier = times_before.find(tid);
    const bool same = earlier != times_before.end() && earlier->second.name == thread.name;
    const ThreadTimes zero;
    const ThreadTimes& from = same ? earlier->second : zero;
    front_user += thread.user_ticks - std::min(thread.user_ticks, from.user_ticks);
    front_kernel += thread.kernel_ticks - std::min(thread.kernel_ticks, from.kernel_ticks);
    front_switches +=
        thread.voluntary_switches - std::min(thread.voluntary_switches, from.voluntary_switches);
  }
  if (front_user + front_kernel > 0) {
    result.front_user_share =
        static_cast<double>(front_user) / static_cast<double>(front_user + front_kernel);
  }
  if (result.answered > 0) {
    const double answered = static_cast<double>(result.answered);
    result.front_switches_per_answer = static_cast<double>(front_switches) / answered;
    result.front_cpu_us = front_ns * 1e-3 / answered;
    result.worker_cpu_us = worker_ns * 1e-3 / answered;
    result.client_cpu_us = client_cpu_s * 1e6 / answered;
  }
  if (!latencies_us.empty()) result.latency = summarize(latencies_us);
  if (result.latency && arrivals_known) {
    result.tail = tail_timeline(arrival_ms, latencies_us, result.latency->p99_us);
  }
  const serving::ServerStats after = server.stats();
  const uint64_t batches = after.batches - before.batches;
  result.mean_batch_rows = batches ? double(after.rows - before.rows) / double(batches) : 0;
  if (batches > 0) {
    const double per_batch_us = 1e-3 / static_cast<double>(batches);
    result.launch_us = double(after.worker_launch_ns - before.worker_launch_ns) * per_batch_us;
    result.wait_us = double(after.worker_wait_ns - before.worker_wait_ns) * per_batch_us;
    result.answer_us = double(after.worker_answer_ns - before.worker_answer_ns) * per_batch_us;
  }
  return result;
}

// One run at `rate` with the flood's connections held open against `port`.
RunResult hold_and_run(const serving::HttpServer& http, const serving::Server& server, int port,
                       const std::string& encoding, const std::vector<std::string>& messages,
                       const std::vector<inference::ModelInferRequest>& grpc_messages, double rate,
                       const Options& options, uint64_t seed) {
  const bool over_grpc = encoding == "grpc";
  // Against gRPC, slowloris connections trickle an HTTP/2 preface that never ends.
  FloodProcess flood(port,
                     {.idle = options.idle_connections,
                      .slowloris = options.slowloris_connections,
                      .trickle_ms = static_cast<int>(options.trickle_ms),
                      .trickle_groups = static_cast<int>(options.trickle_groups)},
                     /*http2=*/over_grpc);
  // Measured once the server holds them: the HTTP front until it has
  // accepted them all (the kernel's backlog took them first), gRPC a while.
  const size_t held_count =
      static_cast<size_t>(options.idle_connections + options.slowloris_connections);
  const Clock::time_point settle_by = Clock::now() + std::chrono::seconds(10);
  if (over_grpc) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } else {
    while (http.open_connections() < held_count && Clock::now() < settle_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const double flood_cpu_before = flood.cpu_s();
  RunResult held = run_load(server, port, encoding, messages, grpc_messages, rate, options, seed);
  held.loaded = true;
  held.flood_cpu_s = flood.cpu_s() - flood_cpu_before;
  held.reopened = flood.stop();
  const double window_ms = static_cast<double>(options.duration_ms);
  for (const int64_t tick_ns : flood.trickle_ns()) {
    const Clock::time_point tick{
        std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(tick_ns))};
    const double at_ms = std::chrono::duration<double, std::milli>(tick - held.start).count();
    if (at_ms >= -50 && at_ms <= window_ms + 50) held.trickle_ms.push_back(at_ms);
  }
  // The next run alone starts once the front has closed them.
  const Clock::time_point closed_by = Clock::now() + std::chrono::seconds(10);
  while (!over_grpc && http.open_connections() > 0 && Clock::now() < closed_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return held;
}

// Note [Load clients sized for a shared host]: one loop per core up to 16
// cores, three quarters of the cores past that (24 of 32).
int64_t default_http_threads() {
  const int64_t cores = std::max<int64_t>(2, std::thread::hardware_concurrency());
  return cores > 16 ? cores * 3 / 4 : cores;
}

Options parse_options(const FlagValues& flags) {
  Options options;
  static_cast<LoadOptions&>(options) = parse_load(kName, flags, kLoad);
  options.encodings = flags.has("--binary") ? std::vector<std::string>{"binary"}
                                            : flags.list("--encodings", options.encodings);
  for (const std::string& encoding : options.encodings) {
    if (encoding != "json" && encoding != "binary" && encoding != "grpc") {
      throw UsageError(
          str_cat(kName, ": --encodings: '", encoding, "' is not json, binary or grpc"));
    }
  }
  if (flags.has("--binary") && flags.has("--encodings")) {
    throw UsageError(str_cat(kName, ": give --binary or --encodings, not both"));
  }
  options.clients = flags.integer("--clients", options.clients, 1, 1024);
  options.connections = flags.integer("--connections", options.connections, 1, 64);
  options.grpc_clients = flags.integer("--grpc-clients", options.grpc_clients, 1, 1024);
  options.grpc_connections = flags.integer("--grpc-connections", options.grpc_connections, 1, 64);
  options.http_threads = flags.integer("--http-threads", 0, 0, 1024);
  if (options.http_threads == 0) options.http_threads = default_http_threads();
  options.grpc_answer_threads = flags.integer("--grpc-answer-threads", 0, 0, 256);
  if (flags.has("--grpc-completion-queues")) {
    options.grpc_completion_queues = flags.integer("--grpc-completion-queues", 0, 0, 256);
  }
  options.answer_relay = !flags.has("--no-answer-relay");
  options.launch_after_wait = flags.has("--launch-after-wait");
  options.idle_connections =
      flags.integer("--idle-connections", options.idle_connections, 0, 1 << 20);
  options.slowloris_connections =
      flags.integer("--slowloris-connections", options.slowloris_connections, 0, 1 << 20);
  options.flood_given = flags.has("--idle-connections") || flags.has("--slowloris-connections");
  const bool flood_given = options.flood_given;
  const std::vector<std::string> held_rates =
      flags.list("--held-rates", {flood_given ? "all" : "32000"});
  if (held_rates == std::vector<std::string>{"all"}) {
    options.held_rates.reset();
  } else if (held_rates == std::vector<std::string>{"none"}) {
    options.held_rates = std::vector<double>{};
  } else {
    options.held_rates = std::vector<double>{};
    for (const std::string& rate : held_rates) {
      options.held_rates->push_back(
          FlagValues(kName, {{"--held-rates", rate}}).positive_number("--held-rates", 1));
    }
  }
  const std::vector<std::string> held_backends =
      flags.list("--held-backends", {flood_given ? "all" : "cudagraphs"});
  if (held_backends == std::vector<std::string>{"all"}) {
    options.held_backends.reset();
  } else {
    options.held_backends = held_backends;
  }
  options.trickle_ms = flags.integer("--trickle-ms", options.trickle_ms, 1, 600000);
  options.trickle_groups = flags.integer("--trickle-groups", options.trickle_groups, 1, 1000);
  options.held_repeats = flags.integer("--held-repeats", options.held_repeats, 1, 20);
  options.warmup_ms = flags.integer("--warmup-ms", options.warmup_ms, 0, 60000);
  return options;
}

const RunResult* find_run(const std::vector<RunResult>& runs, int64_t max_batch,
                          const std::string& backend, const std::string& encoding, double rate,
                          bool loaded = false) {
  for (const RunResult& run : runs) {
    if (run.max_batch == max_batch && run.backend == backend && run.encoding == encoding &&
        run.offered_rate == rate && run.loaded == loaded) {
      return &run;
    }
  }
  return nullptr;
}

// The run of `backend` at `max_batch` in `encoding` with the most answers/s.
const RunResult* best_run(const std::vector<RunResult>& runs, int64_t max_batch,
                          const std::string& backend, const std::string& encoding) {
  const RunResult* best = nullptr;
  for (const RunResult& run : runs) {
    if (run.max_batch == max_batch && run.backend == backend && run.encoding == encoding &&
        !run.loaded && (best == nullptr || run.answered_rate > best->answered_rate)) {
      best = &run;
    }
  }
  return best;
}

// Note [Held verdict from repeats]
// A p99 over 700 ms at 32,000/s is set by the slowest 224 requests, so one
// stall of a few ms decides it (Note [Where the tail arrived]): session 20
// measured 0.5-0.7 ms alone against 9-12 ms held on one host, and 4-7 ms
// alone against 2-2.5 ms held on another. With --held-repeats N (3 by
// default) each held rate runs alone and held N times, alternately, and the
// verdict compares the median p99 of each, every p99 shown beside it. r1 of
// session 21 (H100, 32 cores, JSON): alone 3632, 1768, 766 us, held 1342,
// 813, 1007: its three pairs alone said 0.37x, 0.46x and 1.31x. Test:
// serve_http_smoke_test.sh (--held-repeats 2: two p99s each).
struct HeldVerdict {
  int64_t max_batch = 0;
  std::string backend, encoding;
  double offered_rate = 0;
  std::vector<double> alone_p99s_us, held_p99s_us;
  double alone_p99_us = 0, held_p99_us = 0;  // medians
  uint64_t reopened = 0;
  double ratio() const { return alone_p99_us > 0 ? held_p99_us / alone_p99_us : 0; }
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

std::string joined(const std::vector<double>& values) {
  std::string out;
  for (double value : values) out += (out.empty() ? "" : ", ") + format_fixed(value, 0);
  return out;
}

// One verdict per held (max batch, backend, encoding, rate), in run order.
std::vector<HeldVerdict> held_verdicts(const std::vector<RunResult>& runs) {
  std::vector<HeldVerdict> verdicts;
  for (const RunResult& run : runs) {
    if (!run.loaded || !run.latency) continue;
    auto same = [&](const HeldVerdict& v) {
      return v.max_batch == run.max_batch && v.backend == run.backend &&
             v.encoding == run.encoding && v.offered_rate == run.offered_rate;
    };
    auto found = std::find_if(verdicts.begin(), verdicts.end(), same);
    if (found == verdicts.end()) {
      HeldVerdict verdict{.max_batch = run.max_batch,
                          .backend = run.backend,
                          .encoding = run.encoding,
                          .offered_rate = run.offered_rate};
      for (const RunResult& alone : runs) {
        if (!alone.loaded && alone.latency && alone.max_batch == run.max_batch &&
            alone.backend == run.backend && alone.encoding == run.encoding &&
            alone.offered_rate == run.offered_rate) {
          verdict.alone_p99s_us.push_back(alone.latency->p99_us);
        }
      }
      verdicts.push_back(verdict);
      found = verdicts.end() - 1;
    }
    found->held_p99s_us.push_back(run.latency->p99_us);
    found->reopened += run.reopened;
  }
  for (HeldVerdict& verdict : verdicts) {
    verdict.alone_p99_us = median(verdict.alone_p99s_us);
    verdict.held_p99_us = median(verdict.held_p99s_us);
  }
  return verdicts;
}

// Note [Where the front's time went]
// A saturated run is limited by whatever stage of the path runs out first:
// the front's loops, one of the single threads between the worker and the
// loops (the request reaper, the answer relay), the worker itself, or the
// clients. So each saturated run prints its CPU by thread name, per answer
// and as the busiest thread's share of the run's wall time (a single thread
// near 100% is the limit whatever the other cores do), and how many
// requests the probe found waiting in the server's queue and unanswered in
// the server, of the clients' connections (--clients x --connections, one
// request each): what is not in the server is being read, answered or
// written by the front, or is on its way back to a client.
void print_where_time_went(const std::vector<RunResult>& runs) {
  bool header = false;
  for (const RunResult& run : runs) {
    if (!run.saturated() || run.loaded || run.answered == 0 || run.cpu_wall_s <= 0) continue;
    if (!header)
      std::printf(
          "\nwhere the time went in saturated runs (Note [Where the front's time went]):\n");
    header = true;
    std::string groups;
    int shown = 0;
    for (const ThreadGroupCpu& group : run.cpu_groups) {
      if (shown++ == 8) break;
      groups += str_cat(groups.empty() ? "" : "; ", group.name, " x", group.threads, " ",
                        format_fixed(group.ns * 1e-3 / static_cast<double>(run.answered), 1),
                        " us/answer, busiest ",
                        format_fixed(100.0 * group.busiest_ns * 1e-9 / run.cpu_wall_s, 0), "%");
    }
    std::printf("  %lld %s %s %.0f/s: queued %.0f (max %llu), in the server %.0f; %s\n",
                static_cast<long long>(run.max_batch), run.backend.c_str(), run.encoding.c_str(),
                run.offered_rate, run.queue.mean_queued,
                static_cast<unsigned long long>(run.queue.max_queued), run.queue.mean_pending,
                groups.c_str());
  }
}

void print_tables(const std::vector<RunResult>& runs, const Options& options) {
  Table table({{"max batch", Align::kRight},
               {"backend"},
               {"encoding"},
               {"offered/s", Align::kRight},
               {"sent/s", Align::kRight},
               {"answered/s", Align::kRight},
               {"rejected", Align::kRight},
               {"errors", Align::kRight},
               {"p50 us", Align::kRight},
               {"p99 us", Align::kRight},
               {"mean batch", Align::kRight},
               {"saturated"},
               {"front us/req", Align::kRight},
               {"worker us/req", Align::kRight},
               {"client us/req", Align::kRight},
               {"launch/wait/answer us/batch", Align::kRight},
               {"held open"}});
  const std::string held =
      str_cat(options.idle_connections, " idle + ", options.slowloris_connections, " slow");
  for (const RunResult& run : runs) {
    table.add_row({std::to_string(run.max_batch), run.backend, run.encoding,
                   format_fixed(run.offered_rate, 0), format_fixed(run.sent_rate, 0),
                   format_fixed(run.answered_rate, 0), std::to_string(run.rejected),
                   std::to_string(run.errors),
                   run.latency ? format_fixed(run.latency->median_us, 0) : "-",
                   run.latency ? format_fixed(run.latency->p99_us, 0) : "-",
                   format_fixed(run.mean_batch_rows, 1), run.saturated() ? "yes" : "",
                   format_fixed(run.front_cpu_us, 1), format_fixed(run.worker_cpu_us, 1),
                   format_fixed(run.client_cpu_us, 1),
                   str_cat(format_fixed(run.launch_us, 1), " / ", format_fixed(run.wait_us, 1),
                           " / ", format_fixed(run.answer_us, 1)),
                   run.loaded ? held : ""});
  }
  std::fputs(table.render().c_str(), stdout);
  print_where_time_went(runs);
  for (const RunResult& run : runs) {
    if (run.errors == 0) continue;
    std::printf("  errors at max batch %lld, %s, %s, %.0f/s: first: %s\n",
                static_cast<long long>(run.max_batch), run.backend.c_str(), run.encoding.c_str(),
                run.offered_rate, run.first_error.c_str());
  }
  // The goal: cudagraphs answers >= 2x eager's best, with a lower p99
  // at the rate where that eager run was measured.
  std::printf("\nbest answered/s, cudagraphs over eager (p99 at eager's best rate):\n");
  Table best({{"max batch", Align::kRight},
              {"encoding"},
              {"eager", Align::kRight},
              {"cudagraphs", Align::kRight},
              {"ratio", Align::kRight},
              {"eager p99 us", Align::kRight},
              {"cudagraphs p99 us", Align::kRight}});
  for (int64_t max_batch : options.max_batches) {
    for (const std::string& encoding : options.encodings) {
      const RunResult* eager = best_run(runs, max_batch, "eager", encoding);
      const RunResult* graphs = best_run(runs, max_batch, "cudagraphs", encoding);
      if (!eager || !graphs || eager->answered_rate <= 0) continue;
      const RunResult* graphs_there =
          find_run(runs, max_batch, "cudagraphs", encoding, eager->offered_rate);
      auto p99 = [](const RunResult* run) {
        return run && run->latency ? format_fixed(run->latency->p99_us, 0) : std::string("-");
      };
      best.add_row({std::to_string(max_batch), encoding, format_fixed(eager->answered_rate, 0),
                    format_fixed(graphs->answered_rate, 0),
                    format_ratio(graphs->answered_rate / eager->answered_rate), p99(eager),
                    p99(graphs_there)});
    }
  }
  std::fputs(best.render().c_str(), stdout);
  if (!options.holds_connections()) return;
  // The goal: p99 with the connections held open within 2x of p99 without.
  std::printf(
      "\np99 with %s connections held open over p99 without (goal: <= 2x; "
      "median of %lld runs each):\n",
      held.c_str(), static_cast<long long>(options.held_repeats));
  Table held_table({{"max batch", Align::kRight},
                    {"backend"},
                    {"encoding"},
                    {"offered/s", Align::kRight},
                    {"p99 us", Align::kRight},
                    {"p99 held us", Align::kRight},
                    {"ratio", Align::kRight},
                    {"p99 us, each run"},
                    {"p99 held us, each run"},
                    {"reopened", Align::kRight},
                    {"goal"}});
  for (const HeldVerdict& verdict : held_verdicts(runs)) {
    held_table.add_row({std::to_string(verdict.max_batch), verdict.backend, verdict.encoding,
                        format_fixed(verdict.offered_rate, 0),
                        format_fixed(verdict.alone_p99_us, 0), format_fixed(verdict.held_p99_us, 0),
                        format_ratio(verdict.ratio()), joined(verdict.alone_p99s_us),
                        joined(verdict.held_p99s_us), std::to_string(verdict.reopened),
                        verdict.ratio() <= 2.0 ? "met" : "missed"});
  }
  std::fputs(held_table.render().c_str(), stdout);
  // Note [Where the tail arrived].
  std::printf("\nwhere the p99 tail arrived (10 ms bins from the window's start):\n");
  for (const RunResult& run : runs) {
    if (!options.holds_for(run.backend, run.offered_rate) || !run.latency) continue;
    std::string ticks;
    for (double at : run.trickle_ms) ticks += (ticks.empty() ? "" : ",") + format_fixed(at, 0);
    const std::string flood =
        run.loaded ? str_cat("; flood process ", format_fixed(run.flood_cpu_s, 2),
                             " CPU s; trickle bursts at ms ", ticks.empty() ? "-" : ticks)
                   : "";
    std::printf("  %lld %s %s %.0f/s %s #%lld: %s; %s; %s%s\n",
                static_cast<long long>(run.max_batch), run.backend.c_str(), run.encoding.c_str(),
                run.offered_rate, run.loaded ? "held " : "alone",
                static_cast<long long>(run.repeat), describe(run.tail).c_str(), run.stalls.c_str(),
                run.host_load.c_str(), flood.c_str());
  }
}

nlohmann::json report_json(const std::vector<RunResult>& runs, const Options& options,
                           const nlohmann::json& servers) {
  nlohmann::json report = report_header(kName, options.device);
  report["model"] = options.model;
  report["clients"] = options.clients;
  report["connections_per_client"] = options.connections;
  report["grpc_clients"] = options.grpc_clients;
  report["grpc_calls_in_flight_per_client"] = options.grpc_connections;
  report["http_threads"] = options.http_threads;
  report["grpc_completion_queues"] = options.grpc_completion_queues;
  report["answer_relay"] = options.answer_relay;
  report["launch_after_wait"] = options.launch_after_wait;
  report["duration_ms"] = options.duration_ms;
  report["max_wait_us"] = options.max_wait_us;
  report["gather_inputs"] = options.gather_inputs;
  report["arrivals"] = "open loop, Poisson per client, keep-alive connections";
  report["encodings"] = options.encodings;
  report["latency"] = "scheduled arrival to the whole HTTP answer read by the client";
  report["servers"] = servers;
  report["results"] = nlohmann::json::array();
  for (const RunResult& run : runs) {
    nlohmann::json entry{
        {"max_batch", run.max_batch},
        {"backend", run.backend},
        {"encoding", run.encoding},
        {"offered_per_s", run.offered_rate},
        {"sent", run.sent},
        {"answered", run.answered},
        {"answered_per_s", run.answered_rate},
        {"sent_in_window_per_s", run.sent_rate},
        {"cpu_us_per_answer",
         {{"front", run.front_cpu_us},
          {"worker", run.worker_cpu_us},
          {"clients", run.client_cpu_us}}},
        {"front_threads",
         {{"user_share", run.front_user_share},
          {"voluntary_switches_per_answer", run.front_switches_per_answer}}},
        {"worker_us_per_batch",
         {{"launch", run.launch_us}, {"wait", run.wait_us}, {"answer", run.answer_us}}},
        {"server_queue",
         {{"mean_queued", run.queue.mean_queued},
          {"max_queued", run.queue.max_queued},
          {"mean_pending", run.queue.mean_pending}}},
        {"rejected", run.rejected},
        {"errors", run.errors},
        {"mean_batch_rows", run.mean_batch_rows},
        {"saturated", run.saturated()},
        {"held_open", run.loaded ? nlohmann::json{{"idle", options.idle_connections},
                                                  {"slowloris", options.slowloris_connections},
                                                  {"reopened", run.reopened}}
                                 : nlohmann::json()}};
    if (!run.first_error.empty()) entry["first_error"] = run.first_error;
    entry["repeat"] = run.repeat;
    // Note [Where the front's time went].
    nlohmann::json groups = nlohmann::json::array();
    for (const ThreadGroupCpu& group : run.cpu_groups) {
      groups.push_back(
          {{"name", group.name},
           {"threads", group.threads},
           {"cpu_s", group.ns * 1e-9},
           {"busiest_share", run.cpu_wall_s > 0 ? group.busiest_ns * 1e-9 / run.cpu_wall_s : 0}});
    }
    entry["cpu_by_thread_name"] = groups;
    // Note [Where the tail arrived].
    entry["host_wakeups"] = run.stalls;
    entry["host_load"] = run.host_load;
    if (run.loaded) entry["flood_cpu_s"] = run.flood_cpu_s;
    if (run.tail.count > 0) {
      entry["tail"] = {{"threshold_us", run.tail.threshold_us},
                       {"count", run.tail.count},
                       {"first_ms", run.tail.first_ms},
                       {"last_ms", run.tail.last_ms},
                       {"bins_10ms", run.tail.bins},
                       {"busiest_bin_ms", run.tail.busiest_bin_ms},
                       {"busiest_share", run.tail.busiest_share},
                       {"max_us", run.tail.max_us}};
    }
    if (run.loaded) entry["trickle_bursts_ms"] = run.trickle_ms;
    if (run.latency) entry["latency"] = latency_json(*run.latency);
    if (run.loaded) {
      const RunResult* alone =
          find_run(runs, run.max_batch, run.backend, run.encoding, run.offered_rate);
      if (alone && alone->latency && run.latency) {
        entry["p99_held_over_alone"] = run.latency->p99_us / alone->latency->p99_us;
      }
    } else if (run.backend == "cudagraphs") {
      const RunResult* eager =
          find_run(runs, run.max_batch, "eager", run.encoding, run.offered_rate);
      if (eager && eager->latency && run.latency) {
        entry["p99_eager_over_this"] = eager->latency->p99_us / run.latency->p99_us;
      }
    }
    report["results"].push_back(entry);
  }
  // Note [Held verdict from repeats].
  report["held_repeats"] = options.held_repeats;
  report["warmup_ms"] = options.warmup_ms;
  report["trickle_groups"] = options.trickle_groups;
  report["held_verdicts"] = nlohmann::json::array();
  for (const HeldVerdict& verdict : held_verdicts(runs)) {
    report["held_verdicts"].push_back({{"max_batch", verdict.max_batch},
                                       {"backend", verdict.backend},
                                       {"encoding", verdict.encoding},
                                       {"offered_per_s", verdict.offered_rate},
                                       {"p99_us_alone_runs", verdict.alone_p99s_us},
                                       {"p99_us_held_runs", verdict.held_p99s_us},
                                       {"p99_us_alone_median", verdict.alone_p99_us},
                                       {"p99_us_held_median", verdict.held_p99_us},
                                       {"held_over_alone", verdict.ratio()},
                                       {"reopened", verdict.reopened}});
  }
  return report;
}

int run(int argc, char** argv) {
  // As grove serve: Note [Freed memory kept by the serving process].
  serving::keep_freed_memory_for_serving();
  std::optional<FlagValues> parsed =
      parse_flags_or_help(kName,
                          "Open-loop load over HTTP or gRPC (KServe v2: JSON, binary tensor data "
                          "or gRPC raw contents, "
                          "loopback) on grove's server: answered/s and p50/p99 of eager vs "
                          "cudagraphs.",
                          argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse_options(flags);
  if (options.holds_connections()) {
    // The server ends of the held connections and both ends of the clients'
    // live in this process (the held connections' client ends in a child's).
    try {
      ensure_file_limit(options.idle_connections + options.slowloris_connections +
                        2 * options.clients * options.connections);
    } catch (const UsageError& error) {
      if (options.flood_given) throw;
      // The default measure is skipped, not the benchmark, where files are too few.
      std::printf("held-connections measure skipped: %s\n", error.what());
      options.idle_connections = options.slowloris_connections = 0;
    }
  }
  std::string encodings;
  for (const std::string& encoding : options.encodings) {
    encodings += (encodings.empty() ? "" : ",") + encoding;
  }
  std::printf(
      "serve_http on %s (%s): %s, 1 row per request, HTTP: %lld clients x %lld connections, "
      "gRPC: %lld clients x %lld calls, %lld HTTP threads%s, %lld ms per run, %s\n",
      options.device.str().c_str(),
      runtime::device_context(options.device).platform().name().c_str(), options.model.c_str(),
      static_cast<long long>(options.clients), static_cast<long long>(options.connections),
      static_cast<long long>(options.grpc_clients),
      static_cast<long long>(options.grpc_connections),
      static_cast<long long>(options.http_threads),
      str_cat(options.answer_relay ? "" : " (no answer relay)",
              options.launch_after_wait ? " (launch after wait)" : "")
          .c_str(),
      static_cast<long long>(options.duration_ms), encodings.c_str());
  std::fflush(stdout);
  serving::ProgramFactory model =
      serving::model_file_factory(options.models_dir + "/" + options.model + ".json");
  std::vector<RunResult> runs;
  nlohmann::json servers = nlohmann::json::array();
  for (int64_t max_batch : options.max_batches) {
    for (const std::string& backend : options.backends) {
      serving::ServerConfig config;
      config.devices = {options.device};
      config.backend = backend;
      config.buckets = serving::power_of_two_buckets(max_batch);
      config.max_batch = max_batch;
      config.max_wait = std::chrono::microseconds(options.max_wait_us);
      config.gather_inputs = options.gather_inputs;
      config.launch_after_wait = options.launch_after_wait;
      config.queue_capacity = 1 << 16;
      config.warmup_calls = backend == "cudagraphs" ? 3 : 1;
      Stopwatch watch;
      serving::Server server(model, config);
      // The front's threads default to the cores: connections need none of their own.
      serving::HttpServer http(server, {.model_name = options.model,
                                        .port = 0,
                                        .threads = static_cast<int>(options.http_threads),
                                        .answer_relay = options.answer_relay});
      std::thread listener([&] {
        pthread_setname_np(pthread_self(), "grove-http");  // it runs one of the loops
        http.serve();
      });
      std::optional<serving::GrpcServer> grpc;
      std::thread grpc_listener;
      if (std::find(options.encodings.begin(), options.encodings.end(), "grpc") !=
          options.encodings.end()) {
        grpc.emplace(server,
                     serving::GrpcConfig{
                         .model_name = options.model,
                         .port = 0,
                         .answer_threads = static_cast<int>(options.grpc_answer_threads),
                         .completion_queues = static_cast<int>(options.grpc_completion_queues)});
        grpc_listener = std::thread([&] { grpc->serve(); });
      }
      std::printf("  max batch %lld, %s: compiled and warmed up %zu buckets in %.0f ms\n",
                  static_cast<long long>(max_batch), backend.c_str(), config.buckets.size(),
                  watch.elapsed_us() / 1000);
      std::fflush(stdout);
      const std::string path = "/v2/models/" + options.model + "/infer";
      for (const std::string& encoding : options.encodings) {
        std::mt19937_64 rng(options.seed + static_cast<uint64_t>(max_batch));
        const bool over_grpc = encoding == "grpc";
        const int port = over_grpc ? grpc->port() : http.port();
        std::vector<std::string> messages;
        std::vector<inference::ModelInferRequest> grpc_messages;
        if (over_grpc) {
          grpc_messages = grpc_requests(server.signature(), options.model, rng);
        } else {
          messages = http_requests(server.signature(), path, port, encoding, rng);
        }
        const std::vector<double> rates = options.rates_for(backend);
        // Note [A process's first run is cold]
        // r1 of session 21 (H100, 32 cores, --held-repeats 3): the first run a
        // serve_http process measured had a p99 of 3.6 ms (and 1.9 ms in another
        // process) against 0.6-1.8 ms for every later run, alone or held, and
        // all of that run's slowest 1% arrived in its first 7-10 ms, while the
        // host's wake-ups were on time: the front's and the clients' first
        // requests meet cold allocations and code. So each server runs an
        // unmeasured --warmup-ms at the first rate per encoding before its
        // measured runs. Test: serve_http_smoke_test.sh (--warmup-ms 100: no
        // row of its own; --warmup-ms 0 elsewhere).
        if (options.warmup_ms > 0 && !rates.empty()) {
          Options warmup = options;
          warmup.duration_ms = options.warmup_ms;
          run_load(server, port, encoding, messages, grpc_messages, rates.front(), warmup,
                   options.seed);
        }
        for (size_t r = 0; r < rates.size(); ++r) {
          const uint64_t seed = options.seed * 7919 + r * 31 + static_cast<uint64_t>(max_batch);
          runs.push_back(
              run_load(server, port, encoding, messages, grpc_messages, rates[r], options, seed));
          if (!options.holds_for(backend, rates[r])) continue;
          // Note [Held verdict from repeats]: alone and held alternately.
          for (int64_t repeat = 0; repeat < options.held_repeats; ++repeat) {
            if (repeat > 0) {
              runs.push_back(run_load(server, port, encoding, messages, grpc_messages, rates[r],
                                      options, seed));
              runs.back().repeat = repeat;
            }
            runs.push_back(hold_and_run(http, server, port, encoding, messages, grpc_messages,
                                        rates[r], options, seed));
            runs.back().repeat = repeat;
          }
        }
      }
      http.stop();
      listener.join();
      if (grpc) {
        grpc->stop();
        grpc_listener.join();
      }
      server.shutdown();
      servers.push_back(
          {{"max_batch", max_batch},
           {"backend", backend},
           {"stats", server.stats().to_json()},
           {"backend_snapshots", serving::snapshots_json(server.backend_snapshots())}});
    }
  }
  print_tables(runs, options);
  if (!options.json_path.empty())
    write_json_file(options.json_path, report_json(runs, options, servers));
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--hold-connections") {
    return grove::benchmarks::hold_connections_main(argc, argv);
  }
  if (argc > 1 && std::string(argv[1]) == "--grpc-clients") {
    return grove::benchmarks::grpc_clients_main(argc, argv);
  }
  return grove::benchmarks::benchmark_main("serve_http", grove::benchmarks::run, argc, argv);
}
